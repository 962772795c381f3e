"""Bad MuSiQue, 2WikiMultihopQA, BrowseComp-Plus and FRAMES input: a message naming file,
line (or record) and field, and not one row changed."""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness_app.harness.beir import BeirFormatError
from harness_app.importers.records import ImportRejected
from harness_app.services.benchmarks import benchmark_import
from tests.harness_app.conftest import row_counts
from tests.harness_app.test_import_formats import BROWSECOMP, FRAMES, MUSIQUE, TWOWIKI

pytestmark = pytest.mark.django_db

Build = Callable[[Path], Path]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def _file(name: str, text: str) -> Build:
    def build(tmp: Path) -> Path:
        (tmp / name).write_text(text, encoding="utf-8")
        return tmp / name

    return build


def _expect_rejected(path: Path, fmt: str, message: str) -> None:
    before = row_counts()

    with pytest.raises((BeirFormatError, ImportRejected)) as raised:
        benchmark_import(path=path, name="new", fmt=fmt)

    assert re.search(message, str(raised.value)), str(raised.value)
    assert row_counts() == before


# --- MuSiQue ---------------------------------------------------------------------------


def _musique(edit: Callable[[list[dict[str, Any]]], Any]) -> Build:
    def build(tmp: Path) -> Path:
        rows = _rows(MUSIQUE)
        edit(rows)
        return _jsonl(tmp / "musique.jsonl", rows)

    return build


def _set(path: str, value: Any, row: int = 0) -> Callable[[list[dict[str, Any]]], None]:
    """rows[row][a][b]… = value, for path "a.b…" (numbers index lists); DELETE removes."""

    def edit(rows: list[dict[str, Any]]) -> None:
        *parents, last = path.split(".")
        target: Any = rows[row]
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is DELETE:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value

    return edit


DELETE = object()

MUSIQUE_CASES: dict[str, tuple[Build, str]] = {
    "missing question": (
        _musique(_set("question", DELETE)),
        r"musique\.jsonl, line 1, field 'question': missing",
    ),
    "aliases of the wrong type": (
        _musique(_set("answer_aliases", "the Sallow")),
        r"line 1, field 'answer_aliases': must be a list of strings, got str",
    ),
    "idx of the wrong type": (
        _musique(_set("paragraphs.1.idx", "1", row=1)),
        r"line 2, field 'paragraphs\[1\]\.idx': must be an integer",
    ),
    "answerable of the wrong type": (
        _musique(_set("answerable", "yes")),
        r"line 1, field 'answerable': must be true or false, got str",
    ),
    "duplicate question id": (
        _musique(_set("id", "2hop__1_2", row=1)),
        r"line 2, field 'id': duplicate id '2hop__1_2', first on line 1",
    ),
    "duplicate paragraph idx": (
        _musique(_set("paragraphs.2.idx", 0)),
        r"line 1, field 'paragraphs\[2\]\.idx': duplicate idx 0 \(first in paragraphs\[0\]\)",
    ),
    "hop supported by no paragraph": (
        _musique(_set("question_decomposition.1.paragraph_support_idx", 7)),
        r"line 1, field 'question_decomposition\[1\]\.paragraph_support_idx': "
        r"no paragraph has idx 7",
    ),
    "malformed JSON": (
        _file("musique.jsonl", '{"id": "x",\n'),
        r"musique\.jsonl, line 1: malformed JSON",
    ),
    "empty file": (
        _file("musique.jsonl", "\n"),
        r"musique\.jsonl: the corpus has no documents",
    ),
}


@pytest.mark.parametrize("case", MUSIQUE_CASES)
def test_bad_musique_input(existing, tmp_path: Path, case: str) -> None:
    build, message = MUSIQUE_CASES[case]
    _expect_rejected(build(tmp_path), "musique", message)


# --- 2WikiMultihopQA ---------------------------------------------------------------------


def _twowiki(edit: Callable[[list[dict[str, Any]]], Any]) -> Build:
    def build(tmp: Path) -> Path:
        rows = json.loads(TWOWIKI.read_text(encoding="utf-8"))
        edit(rows)
        path = tmp / "dev.json"
        path.write_text(json.dumps(rows))  # one line, as the official files are
        return path

    return build


def _duplicate_first(rows: list[dict[str, Any]]) -> None:
    rows.append(copy.deepcopy(rows[0]))


TWOWIKI_CASES: dict[str, tuple[Build, str]] = {
    "missing answer": (
        _twowiki(_set("answer", DELETE)),
        r"dev\.json, line 1, field 'answer': missing \(record 0\)",
    ),
    "context of the wrong type": (
        _twowiki(_set("context", "Lantern Road", row=1)),
        r"line 1, field 'context': must be a list, got str \(record 1\)",
    ),
    "sentences of the wrong type": (
        _twowiki(_set("context.0.1", "one sentence")),
        r"field 'context\[0\]': sentences must be a list of strings \(record 0\)",
    ),
    "duplicate question id": (
        _twowiki(_duplicate_first),
        r"field '_id': duplicate id 'a1b2', first in record 0 \(record 3\)",
    ),
    "supporting title outside the context": (
        _twowiki(_set("supporting_facts.1.0", "Nowhere")),
        r"field 'supporting_facts\[1\]': title 'Nowhere' is not in this question's context "
        r"\(record 0\)",
    ),
    "empty array": (
        _file("dev.json", "[]"),
        r"dev\.json: the corpus has no documents",
    ),
    "empty file": (
        _file("dev.json", ""),
        r"dev\.json: the corpus has no documents",
    ),
}


@pytest.mark.parametrize("case", TWOWIKI_CASES)
def test_bad_twowiki_input(existing, tmp_path: Path, case: str) -> None:
    build, message = TWOWIKI_CASES[case]
    _expect_rejected(build(tmp_path), "2wikimultihopqa", message)


def test_bad_twowiki_jsonl_names_the_line(existing, tmp_path: Path) -> None:
    rows = json.loads(TWOWIKI.read_text(encoding="utf-8"))
    rows[2]["supporting_facts"][0][1] = "first"
    path = _jsonl(tmp_path / "dev.jsonl", rows)

    _expect_rejected(
        path,
        "2wikimultihopqa",
        r"dev\.jsonl, line 3, field 'supporting_facts\[0\]': sentence index must be an "
        r"integer$",
    )


# --- BrowseComp-Plus ---------------------------------------------------------------------


def _browsecomp(name: str, edit: Callable[[list[Any]], Any]) -> Build:
    """The fixture folder with one file's rows (JSONL, or text lines for .txt) edited."""

    def build(tmp: Path) -> Path:
        folder = shutil.copytree(BROWSECOMP, tmp / "bcp")
        path = folder / name
        if path.suffix == ".txt":
            lines = path.read_text().splitlines()
            edit(lines)
            path.write_text("".join(line + "\n" for line in lines))
        else:
            rows = _rows(path)
            edit(rows)
            _jsonl(path, rows)
        return folder

    return build


def _append(value: Any) -> Callable[[list[Any]], None]:
    return lambda rows: rows.append(value)


def _clear(rows: list[Any]) -> None:
    rows.clear()


QRELS_TXT = "topics-qrels/qrel_evidence.txt"
BROWSECOMP_CASES: dict[str, tuple[Build, str]] = {
    "document without text": (
        _browsecomp("corpus.jsonl", _set("text", DELETE, row=1)),
        r"corpus\.jsonl, line 2, field 'text': missing",
    ),
    "query id of the wrong type": (
        _browsecomp("queries.jsonl", _set("query_id", 1)),
        r"queries\.jsonl, line 1, field 'query_id': must be a string, got int",
    ),
    "gold docs of the wrong type": (
        _browsecomp("queries.jsonl", _set("gold_docs", "101")),
        r"queries\.jsonl, line 1, field 'gold_docs': must be a list, got str",
    ),
    "duplicate docid": (
        _browsecomp("corpus.jsonl", _append({"docid": "101", "text": "again"})),
        r"corpus\.jsonl, line 6, field 'docid': duplicate id '101' \(first on line 1\)",
    ),
    "duplicate query id": (
        _browsecomp("queries.jsonl", _append({"query_id": "1", "query": "q", "answer": "a"})),
        r"queries\.jsonl, line 3, field 'query_id': duplicate id '1' \(first on line 1\)",
    ),
    "gold doc not in the corpus": (
        _browsecomp("queries.jsonl", _set("gold_docs.0.docid", "999")),
        r"queries\.jsonl, line 1, field 'gold_docs\[0\]': unknown document '999'",
    ),
    "qrel file naming an unknown query": (
        _browsecomp(QRELS_TXT, _append("9 Q0 101 1")),
        r"qrel_evidence\.txt, line 3, field 'query-id': unknown query '9'",
    ),
    "qrel file naming an unknown document": (
        _browsecomp(QRELS_TXT, _append("2 Q0 555 1")),
        r"qrel_evidence\.txt, line 3, field 'docid': unknown document '555'",
    ),
    "qrel line with three columns": (
        _browsecomp(QRELS_TXT, _append("2 103 1")),
        r"qrel_evidence\.txt, line 3: expected 4 columns \(query-id Q0 docid relevance\), got 3",
    ),
    "empty corpus": (
        _browsecomp("corpus.jsonl", _clear),
        r"corpus\.jsonl: the corpus has no documents",
    ),
    "empty queries": (
        _browsecomp("queries.jsonl", _clear),
        r"queries\.jsonl: no queries",
    ),
}


@pytest.mark.parametrize("case", BROWSECOMP_CASES)
def test_bad_browsecomp_input(existing, tmp_path: Path, case: str) -> None:
    build, message = BROWSECOMP_CASES[case]
    _expect_rejected(build(tmp_path), "browsecomp-plus", message)


def test_a_browsecomp_folder_needs_its_queries(existing, tmp_path: Path) -> None:
    folder = shutil.copytree(BROWSECOMP, tmp_path / "bcp")
    (folder / "queries.jsonl").unlink()

    _expect_rejected(folder, "browsecomp-plus", r"has no queries\.jsonl or browsecomp_plus_decr")


# --- FRAMES --------------------------------------------------------------------------------


def _frames(edit: Callable[[Path], Any]) -> Build:
    def build(tmp: Path) -> Path:
        folder = shutil.copytree(FRAMES, tmp / "frames")
        edit(folder)
        return folder

    return build


def _tsv_replace(old: str, new: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / "test.tsv"
        path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")

    return edit


def _pages(edit: Callable[[list[Any]], Any]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        rows = _rows(folder / "pages.jsonl")
        edit(rows)
        _jsonl(folder / "pages.jsonl", rows)

    return apply


def _questions_jsonl(rows: list[Any]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        (folder / "test.tsv").unlink()
        _jsonl(folder / "questions.jsonl", rows)

    return edit


LINK = "https://en.wikipedia.org/wiki/Orla_Venn"
FRAMES_CASES: dict[str, tuple[Build, str]] = {
    "no Answer column": (
        _frames(_tsv_replace("\tAnswer\t", "\tAnswers\t")),
        r"test\.tsv, line 2, field 'Answer': missing",
    ),
    "links that are not a list": (
        _frames(_tsv_replace("['https://en.wikipedia.org/wiki/Orla_Venn', 'https://en.m", "[x")),
        r"test\.tsv, line 3, field 'wiki_links': must be a list of URLs",
    ),
    "links of the wrong type (JSONL)": (
        _frames(_questions_jsonl([{"Prompt": "p", "Answer": "a", "wiki_links": 5}])),
        r"questions\.jsonl, line 1, field 'wiki_links': must be a list of URLs, got int",
    ),
    "duplicate question id": (
        _frames(
            _questions_jsonl([{"id": "f", "Prompt": "p", "Answer": "a", "wiki_links": [LINK]}] * 2)
        ),
        r"questions\.jsonl, line 2, field 'id': duplicate id 'f' \(first on line 1\)",
    ),
    "two pages for one title": (
        _frames(_pages(_append({"title": "Orla_Venn", "text": "again"}))),
        r"pages\.jsonl, line 5, field 'title': a second page for 'Orla_Venn' "
        r"\(first on line 1\)",
    ),
    "page without text": (
        _frames(_pages(_set("text", DELETE, row=2))),
        r"pages\.jsonl, line 3, field 'text': missing",
    ),
    "a link with no page": (
        _frames(_pages(lambda rows: rows.pop(2))),  # Bramwick Bridge
        r"test\.tsv, line 3, field 'wiki_links\[1\]': no page in pages\.jsonl for "
        r"'https://en\.m\.wikipedia\.org/wiki/Bramwick%20Bridge'$",
    ),
    "several links with no page": (
        _frames(lambda folder: _jsonl(folder / "pages.jsonl", [{"title": "K", "text": "k"}])),
        r"test\.tsv, line 2, field 'wiki_links\[0\]': no page in pages\.jsonl for "
        r"'https://en\.wikipedia\.org/wiki/Orla_Venn' \(3 more links have no page: line 2 "
        r"'https://en\.wikipedia\.org/wiki/Hethercombe#Geography'; line 3 ",
    ),
    "no questions": (
        _frames(lambda folder: (folder / "test.tsv").write_text("Prompt\tAnswer\twiki_links\n")),
        r"test\.tsv: no queries",
    ),
    "two questions files": (
        _frames(lambda folder: (folder / "more.csv").write_text("Prompt,Answer\n")),
        r"needs exactly one questions file .* found more\.csv, test\.tsv",
    ),
}


@pytest.mark.parametrize("case", FRAMES_CASES)
def test_bad_frames_input(existing, tmp_path: Path, case: str) -> None:
    build, message = FRAMES_CASES[case]
    _expect_rejected(build(tmp_path), "frames", message)
