"""FRAMES-style folders: questions linking Wikipedia pages, and the pages' text the user supplies.

Nothing is downloaded: pages.jsonl must hold every linked page. A link and a page meet on
the page's key: for a Wikipedia URL the title (percent-decoding undone, spaces as "_",
first letter upper case, fragment dropped: `https://en.wikipedia.org/wiki/ada_Lovelace#Life`
→ `Ada_Lovelace`), for any other URL the URL without its fragment, and for a bare title the
title as a Wikipedia title. The key is the document id.
"""

from __future__ import annotations

import ast
import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from harness_app.harness.beir import DEFAULT_MAX_LINE_BYTES, iter_lines
from harness_app.harness.types import Document
from harness_app.importers.fields import json_object, metadata_field, storable, string_field
from harness_app.importers.paragraphs import answer_in_text
from harness_app.importers.records import (
    BenchmarkFormatError,
    ImportRejected,
    QrelRecord,
    QueryRecord,
)

PAGES_FILE = "pages.jsonl"
QUESTION_SUFFIXES = (".csv", ".tsv", ".jsonl")
MISSING_SHOWN = 5


def page_key(link: str) -> str:
    """The key a link or a page's url/title is matched on ("" when there is nothing)."""
    link = link.strip()
    parts = urlsplit(link)
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        host = parts.netloc.lower()
        if host.endswith("wikipedia.org") and parts.path.startswith("/wiki/"):
            return _wiki_title(unquote(parts.path.removeprefix("/wiki/")))
        return urlunsplit((parts.scheme.lower(), host, parts.path, parts.query, ""))
    return _wiki_title(link)


def _wiki_title(title: str) -> str:
    words = " ".join(title.replace("_", " ").split())
    return (words[:1].upper() + words[1:]).replace(" ", "_")


@dataclass(frozen=True, slots=True)
class FramesQuestion:
    line: int
    query: QueryRecord
    links: tuple[tuple[str, str, str], ...]  # (page key, field, link as written), keys once


class FramesSource:
    """A FRAMES-style folder: one questions file (.csv, .tsv or .jsonl) and pages.jsonl.

    Questions: `Prompt`, `Answer`, and `wiki_links` (a list, or in CSV/TSV the list written
    as JSON or Python) or else the `wikipedia_link_1`, `wikipedia_link_2`, … columns; the
    id is the `id` field if there is one, else the row's position from 0. Pages: `text`
    and a `url` or a `title` (or both; the url decides the key). Corpus: every page.
    Qrels: each question's linked pages, grade 2 where the answer occurs in the page, 1
    otherwise. A link with no page is an error that names the row and the URL.
    """

    fmt = "frames"

    def __init__(self, folder: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        if not folder.is_dir():
            raise ImportRejected(f"{folder} is not a folder; a FRAMES benchmark is one")
        self.corpus_path = folder / PAGES_FILE
        if not self.corpus_path.is_file():
            raise ImportRejected(f"FRAMES folder {folder} has no {PAGES_FILE}")
        found = sorted(
            p
            for p in folder.iterdir()
            if p.is_file() and p.suffix.lower() in QUESTION_SUFFIXES and p.name != PAGES_FILE
        )
        if len(found) != 1:
            names = ", ".join(p.name for p in found) or "none"
            raise ImportRejected(
                f"FRAMES folder {folder} needs exactly one questions file "
                f"(.csv, .tsv or .jsonl besides {PAGES_FILE}); found {names}"
            )
        self.queries_path = self.qrels_path = found[0]
        self.max_line_bytes = max_line_bytes
        self.warnings: list[str] = []

    # --- pages ---------------------------------------------------------------------------

    def _pages(self) -> Iterator[tuple[int, Document]]:
        path = self.corpus_path
        seen: dict[str, int] = {}
        for number, line in iter_lines(path, max_line_bytes=self.max_line_bytes):
            row = json_object(path, number, line)
            url = string_field(path, number, row, "url", default="")
            title = string_field(path, number, row, "title", default="")
            key = page_key(url or title)
            name = "url" if url else "title"
            if not key:
                raise BenchmarkFormatError(path, number, "a page needs a url or a title", name)
            if len(key) > 500:
                raise BenchmarkFormatError(path, number, "is longer than 500 characters", name)
            if (first := seen.setdefault(key, number)) != number:
                message = f"a second page for {key!r} (first on line {first})"
                raise BenchmarkFormatError(path, number, message, name)
            title = title or (url.strip() if "://" in key else key.replace("_", " "))
            yield number, Document(key, title, string_field(path, number, row, "text"))

    def documents(self) -> Iterator[Document]:
        return (doc for _, doc in self._pages())

    def duplicate_document(self) -> BenchmarkFormatError | None:
        return None  # _pages refuses a second page for a key as it reads it

    # --- questions -----------------------------------------------------------------------

    def _rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        path = self.queries_path
        if path.suffix.lower() == ".jsonl":
            for number, line in iter_lines(path, max_line_bytes=self.max_line_bytes):
                yield number, json_object(path, number, line)
            return
        yield from _table_rows(path, "\t" if path.suffix.lower() == ".tsv" else ",")

    def _questions(self) -> Iterator[FramesQuestion]:
        path = self.queries_path
        seen: dict[str, int] = {}
        for position, (number, row) in enumerate(self._rows()):
            qid = str(position) if "id" not in row else string_field(path, number, row, "id")
            if not qid.strip():
                raise BenchmarkFormatError(path, number, "is blank", "id")
            if (first := seen.setdefault(qid, number)) != number:
                message = f"duplicate id {qid!r} (first on line {first})"
                raise BenchmarkFormatError(path, number, message, "id")
            answer = string_field(path, number, row, "Answer")
            links = _links(path, number, row)
            metadata: dict[str, Any] = {"answer": answer, "wiki_links": [li for _, li in links]}
            if isinstance(row.get("reasoning_types"), str):
                metadata["reasoning_types"] = row["reasoning_types"]
            query = QueryRecord(
                qid,
                string_field(path, number, row, "Prompt"),
                answer,
                metadata_field(path, number, {"metadata": metadata}),
            )
            keyed: dict[str, tuple[str, str, str]] = {}
            for field, link in links:
                keyed.setdefault(page_key(link), (page_key(link), field, link))
            yield FramesQuestion(number, query, tuple(keyed.values()))

    def queries(self) -> Iterator[QueryRecord]:
        return (question.query for question in self._questions())

    def qrels(self) -> Iterator[QrelRecord]:
        questions = list(self._questions())  # a few hundred small records
        linking: dict[str, list[FramesQuestion]] = {}
        for question in questions:
            for key, _, _ in question.links:
                linking.setdefault(key, []).append(question)
        answer_pages: set[tuple[str, str]] = set()  # (query id, key) where the answer occurs
        present: set[str] = set()
        for _, page in self._pages():
            for question in linking.get(page.doc_id, []):
                present.add(page.doc_id)
                if answer_in_text([question.query.answer], page.title, page.text):
                    answer_pages.add((question.query.external_id, page.doc_id))
        self._missing_raise(questions, present)
        path = str(self.queries_path)
        for question in questions:
            qid = question.query.external_id
            for key, field, _ in question.links:
                grade = 2 if (qid, key) in answer_pages else 1
                yield QrelRecord(qid, key, grade, path, question.line, doc_field=field)

    def _missing_raise(self, questions: list[FramesQuestion], present: set[str]) -> None:
        missing = [
            (question.line, field, link)
            for question in questions
            for key, field, link in question.links
            if key not in present
        ]
        if not missing:
            return
        line, field, link = missing[0]
        message = f"no page in {PAGES_FILE} for {link!r}"
        if len(missing) > 1:
            shown = "; ".join(f"line {n} {li!r}" for n, _, li in missing[1 : 1 + MISSING_SHOWN])
            more = len(missing) - 1 - MISSING_SHOWN
            message += f" ({len(missing) - 1} more links have no page: {shown}"
            message += f"; and {more} more)" if more > 0 else ")"
        raise BenchmarkFormatError(self.queries_path, line, message, field)


def _table_rows(path: Path, delimiter: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(first line, row) per non-blank record of a CSV or TSV file with a header."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        number = 1
        try:
            header = next(reader, None)
            if header is None:
                return
            start = reader.line_num + 1
            for cells in reader:
                number, start = start, reader.line_num + 1
                if not any(cell.strip() for cell in cells):
                    continue
                if len(cells) > len(header):
                    message = f"{len(cells)} cells, but the header names {len(header)} columns"
                    raise BenchmarkFormatError(path, number, message)
                yield number, dict(zip(header, cells, strict=False))
        except UnicodeDecodeError:
            raise BenchmarkFormatError(path, reader.line_num + 1, "not valid UTF-8") from None
        except csv.Error as exc:
            raise BenchmarkFormatError(path, reader.line_num, f"unreadable: {exc}") from None


def _links(path: Path, line: int, row: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, link) for each of a question's links, in order."""
    if "wiki_links" in row:
        value = row["wiki_links"]
        if isinstance(value, str):
            value = _list_literal(path, line, value)
        if not isinstance(value, list):
            message = f"must be a list of URLs, got {type(value).__name__}"
            raise BenchmarkFormatError(path, line, message, "wiki_links")
        fields = [(f"wiki_links[{i}]", link) for i, link in enumerate(value)]
    else:
        numbered = sorted(
            (int(name.rsplit("_", 1)[1].rstrip("+")), name)
            for name in row
            if name.startswith("wikipedia_link_") and name.rsplit("_", 1)[1].rstrip("+").isdigit()
        )
        fields = [(name, row[name]) for _, name in numbered if row[name]]
    links = []
    for name, link in fields:
        if not isinstance(link, str) or not page_key(link):
            raise BenchmarkFormatError(path, line, "must be a URL or a title", name)
        links.append((name, storable(path, line, name, link.strip())))
    if not links:
        raise BenchmarkFormatError(path, line, "the question links no page", "wiki_links")
    return links


def _list_literal(path: Path, line: int, text: str) -> Any:
    """A list written in a table cell, as JSON or as Python (FRAMES's own TSV)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        message = "must be a list of URLs (JSON or Python list syntax)"
        raise BenchmarkFormatError(path, line, message, "wiki_links") from None
