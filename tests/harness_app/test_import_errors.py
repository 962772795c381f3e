"""Bad input: a clear message naming file, line and field, and not one row changed."""

from __future__ import annotations

import json
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from harness_app.harness.beir import BeirFormatError
from harness_app.importers.records import ImportRejected
from harness_app.services.benchmarks import benchmark_import
from tests.harness_app.conftest import (
    HOTPOT,
    QRELS,
    row_counts,
    write_beir,
    write_hotpot,
)

pytestmark = pytest.mark.django_db

DOC = '{"_id": "%s", "title": "T", "text": "Some text."}\n'


def _corpus_with(line: str | bytes, at: int = 2) -> Callable[[Path], None]:
    """Write the standard folder, then put `line` into corpus.jsonl as line `at`."""

    def build(folder: Path) -> None:
        write_beir(folder)
        path = folder / "corpus.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        lines.insert(at - 1, line if isinstance(line, bytes) else line.encode())
        path.write_bytes(b"".join(lines))

    return build


def _queries_with(line: str, at: int = 2) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        write_beir(folder)
        path = folder / "queries.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        lines.insert(at - 1, line)
        path.write_text("".join(lines), encoding="utf-8")

    return build


def _qrels(*rows: str) -> Callable[[Path], None]:
    return lambda folder: write_beir(folder, qrels=[*QRELS, *rows])


CASES = {
    "malformed JSON": (
        _corpus_with('{"_id": "broken", "text": \n', at=3),
        r"corpus\.jsonl, line 3: malformed JSON: .* at column",
    ),
    "not an object": (
        _corpus_with('["a list"]\n'),
        r"corpus\.jsonl, line 2: expected a JSON object, got list",
    ),
    "document without text": (
        _corpus_with('{"_id": "no-text", "title": "T"}\n'),
        r"corpus\.jsonl, line 2, field 'text': missing",
    ),
    "document without id": (
        _corpus_with('{"text": "x"}\n'),
        r"corpus\.jsonl, line 2, field '_id': missing",
    ),
    "id of the wrong type": (
        _corpus_with('{"_id": 7, "text": "x"}\n'),
        r"corpus\.jsonl, line 2, field '_id': must be a string, got int",
    ),
    "query without text": (
        _queries_with('{"_id": "q9", "metadata": {}}\n'),
        r"queries\.jsonl, line 2, field 'text': missing",
    ),
    "duplicate document id": (
        _corpus_with(DOC % "fenn", at=5),
        r"corpus\.jsonl, line 5, field '_id': duplicate id 'fenn' \(first on line 3\)",
    ),
    "duplicate query id": (
        _queries_with('{"_id": "q1", "text": "again"}\n', at=3),
        r"queries\.jsonl, line 3, field '_id': duplicate id 'q1' \(first on line 1\)",
    ),
    "qrel naming an unknown query": (
        _qrels("q9\talder\t1\n"),
        r"qrels/test\.tsv, line 7, field 'query-id': unknown query 'q9'",
    ),
    "qrel naming an unknown document": (
        _qrels("q1\tnowhere\t1\n"),
        r"qrels/test\.tsv, line 7, field 'corpus-id': unknown document 'nowhere'",
    ),
    "qrel judged twice": (
        _qrels("q1\tfenn\t1\n"),
        r"qrels/test\.tsv, line 7, field 'corpus-id': 'q1'/'fenn' is judged twice",
    ),
    "qrel with a bad score": (
        _qrels("q1\talder\thigh\n"),
        r"qrels/test\.tsv, line 7, field 'score': must be an integer from 0 to 32767, got 'high'",
    ),
    "qrel with two columns": (
        _qrels("q1\talder\n"),
        r"qrels/test\.tsv, line 7: expected 3 tab-separated columns, got 2",
    ),
    "empty corpus": (
        lambda folder: write_beir(folder, corpus=["\n"]),
        r"corpus\.jsonl: the corpus has no documents",
    ),
    "no qrels": (lambda folder: write_beir(folder, qrels=[]), r"qrels/test\.tsv: no judgements"),
    "missing qrels file": (
        lambda folder: write_beir(folder, split="dev"),
        r"BEIR folder .* has no qrels/test\.tsv",
    ),
    "non-UTF-8 bytes": (
        _corpus_with(b'{"_id": "latin1", "text": "caf\xe9"}\n'),
        r"corpus\.jsonl, line 2: not valid UTF-8 \(byte offset 30 in the line\)",
    ),
    "NUL character": (
        _corpus_with('{"_id": "nul", "text": "a\\u0000b"}\n'),
        r"corpus\.jsonl, line 2, field 'text': contains a NUL character",
    ),
    "lone surrogate": (
        _corpus_with('{"_id": "sur", "title": "\\ud800", "text": "x"}\n'),
        r"corpus\.jsonl, line 2, field 'title': contains a lone surrogate U\+D800",
    ),
    "split naming a path": (lambda folder: write_beir(folder), r"split '\.\./x'"),
    "NUL in query metadata": (
        _queries_with('{"_id": "q9", "text": "t", "metadata": {"answer": "a\\u0000"}}\n'),
        r"queries\.jsonl, line 2, field 'metadata': contains a NUL character",
    ),
    "qrel with a superscript score": (
        _qrels("q1\talder\t\u00b2\n"),
        r"qrels/test\.tsv, line 7, field 'score': must be an integer from 0 to 32767",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_beir_input_is_rejected_and_nothing_changes(
    existing, tmp_path: Path, case: str
) -> None:
    build, message = CASES[case]
    folder = tmp_path / "bad"
    build(folder)
    split = "../x" if case == "split naming a path" else "test"
    before = row_counts()

    with pytest.raises((BeirFormatError, ImportRejected)) as raised:
        benchmark_import(path=folder, name="new", fmt="beir", split=split)

    assert re.search(message, str(raised.value)), str(raised.value)
    assert row_counts() == before


def test_a_2_gb_line_stops_at_the_line_limit(existing, tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "huge")
    with open(folder / "corpus.jsonl", "r+b") as handle:
        handle.seek(0, 2)
        handle.write(b'{"_id": "huge", "text": "')
        handle.truncate(2 * 1024**3)  # sparse: costs no disk, and no newline ever comes
    before = row_counts()

    tracemalloc.start()
    try:
        with pytest.raises(
            BeirFormatError, match=r"corpus\.jsonl, line 7: line is longer than 67108864 bytes"
        ):
            benchmark_import(path=folder, name="new", fmt="beir")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 256 * 1024**2  # read up to the 64 MiB limit, never the 2 GB line
    assert row_counts() == before


def test_an_existing_name_without_replace_is_refused(existing, beir_folder: Path) -> None:
    before = row_counts()

    with pytest.raises(
        ImportRejected, match="benchmark 'existing' already exists with different content"
    ):
        benchmark_import(path=beir_folder, name="existing", fmt="beir")

    assert row_counts() == before


HOTPOT_CASES = {
    "malformed JSON": (
        lambda path: path.write_text('[{"_id": "h1", "question": "q",\n "answer": }]'),
        r"hotpot\.json, line 2: malformed JSON: Expecting value",
    ),
    "not an array": (
        lambda path: path.write_text('{"_id": "h1"}'),
        r"hotpot\.json, line 1: expected a JSON array",
    ),
    "record without answer": (
        lambda path: write_hotpot(
            path, [{"_id": "h1", "question": "q", "supporting_facts": [], "context": []}]
        ),
        r"hotpot\.json, line 2, field 'answer': missing \(record 0\)",
    ),
    "context of the wrong shape": (
        lambda path: write_hotpot(
            path,
            [
                {
                    "_id": "h1",
                    "question": "q",
                    "answer": "a",
                    "supporting_facts": [],
                    "context": [["T", "not a list"]],
                }
            ],
            indent=None,
        ),
        r"hotpot\.json, line 1, field 'context\[0\]': sentences must be a list of strings",
    ),
    "duplicate question id": (
        lambda path: write_hotpot(
            path,
            [
                {
                    "_id": "h1",
                    "question": "q",
                    "answer": "a",
                    "supporting_facts": [],
                    "context": [["T", ["s"]]],
                }
            ]
            * 2,
            indent=None,
        ),
        r"hotpot\.json, line 1, field '_id': duplicate id 'h1', first in record 0 \(record 1\)",
    ),
    "unfinished file": (
        lambda path: path.write_text(json.dumps(HOTPOT)[:-1]),
        r"hotpot\.json, line 1: ends inside the array",
    ),
    "empty array": (
        lambda path: path.write_text("[]"),
        r"hotpot\.json: the corpus has no documents",
    ),
}


@pytest.mark.parametrize("case", HOTPOT_CASES)
def test_bad_hotpotqa_input_is_rejected_and_nothing_changes(
    existing, tmp_path: Path, case: str
) -> None:
    build, message = HOTPOT_CASES[case]
    path = tmp_path / "hotpot.json"
    build(path)
    before = row_counts()

    with pytest.raises((BeirFormatError, ImportRejected)) as raised:
        benchmark_import(path=path, name="new", fmt="hotpotqa")

    assert re.search(message, str(raised.value)), str(raised.value)
    assert row_counts() == before
