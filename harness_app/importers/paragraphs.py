"""Question files whose corpus is their questions' own paragraphs (MuSiQue, 2WikiMultihopQA).

Each question carries its paragraphs; the corpus is their union. A paragraph's document id is
its title made safe plus a hash of title and text, so the same paragraph under the same title
is one document wherever it appears, and a judgement is resolved inside its own question
without a corpus-wide map.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_app.harness.beir import DEFAULT_MAX_LINE_BYTES, iter_lines
from harness_app.harness.types import Document
from harness_app.importers.fields import json_object, storable
from harness_app.importers.hotpotqa import MAX_RECORD_BYTES, JsonArrayReader, hotpotqa_doc_id
from harness_app.importers.records import (
    BenchmarkFormatError,
    ImportRejected,
    QrelRecord,
    QueryRecord,
)

YES_NO = ("yes", "no")


@dataclass(frozen=True, slots=True)
class Paragraph:
    title: str
    text: str

    @property
    def doc_id(self) -> str:
        # computed when asked: the queries pass never asks, the qrels pass for a few
        return paragraph_doc_id(self.title, self.text)


@dataclass(frozen=True, slots=True)
class QuestionRecord:
    line: int
    query: QueryRecord
    paragraphs: tuple[Paragraph, ...]
    judged: tuple[tuple[int, int], ...]  # (position in paragraphs, grade)
    skipped: bool = False  # checked, but not imported (MuSiQue's unanswerable questions)


def paragraph_doc_id(title: str, text: str) -> str:
    """`<title made safe>-<12 hex digits of sha1(title, text)>`: stable across files."""
    digest = hashlib.sha1(f"{title}\x00{text}".encode(), usedforsecurity=False).hexdigest()
    return f"{hotpotqa_doc_id(title)[:200]}-{digest[:12]}"


def join_sentences(sentences: Iterable[str]) -> str:
    """Sentences joined by one space, unless one already ends or starts with whitespace."""
    text = ""
    for sentence in sentences:
        if text and sentence and not text[-1].isspace() and not sentence[0].isspace():
            text += " "
        text += sentence
    return text


def answer_in_text(answers: Iterable[str], *texts: str) -> bool:
    """Whether any answer occurs in the texts as whole words, ignoring case."""
    haystack = "\n".join(texts).casefold()
    for answer in answers:
        needle = answer.strip().casefold()
        if needle and re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack):
            return True
    return False


def string_list(path: Path, line: int, row: dict[str, Any], name: str) -> list[str]:
    """row[name] as a list of strings; an absent field is an empty list."""
    value = row.get(name, [])
    if not isinstance(value, list):
        message = f"must be a list of strings, got {type(value).__name__}"
        raise BenchmarkFormatError(path, line, message, name)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            message = f"must be a string, got {type(item).__name__}"
            raise BenchmarkFormatError(path, line, message, f"{name}[{i}]")
        storable(path, line, f"{name}[{i}]", item)
    return value


def json_records(
    path: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, int | None, Any]]:
    """(line, record index, value) for each record of a JSONL file or of one JSON array.

    The index is None for JSONL, where the line says it all; an array is often written on
    one line, so its messages name the record as well.
    """
    if _first_char(path) == "[":
        yield from JsonArrayReader(path, max_record_bytes=MAX_RECORD_BYTES)
        return
    for line, text in iter_lines(path, max_line_bytes=max_line_bytes):
        yield line, None, json_object(path, line, text)


def _first_char(path: Path) -> str:
    with open(path, "rb") as handle:
        head = handle.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    return chr(head[0]) if head else ""


class ParagraphSource:
    """A question file read as a benchmark; subclasses read one record (`_record`)."""

    fmt = ""
    label = ""
    id_field = "id"

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise ImportRejected(f"no {self.label} file at {path}")
        # one file holds everything; the three paths keep messages uniform across formats
        self.corpus_path = self.queries_path = self.qrels_path = path
        self.warnings: list[str] = []

    def _record(self, line: int, row: dict[str, Any]) -> QuestionRecord:
        raise NotImplementedError

    def _skipped(self, count: int) -> str:
        return f"{count} question(s) were skipped"

    def _records(self) -> Iterator[QuestionRecord]:
        path = self.corpus_path
        seen: dict[str, str] = {}
        skipped = 0
        for line, index, value in json_records(path):
            place = f"on line {line}" if index is None else f"in record {index}"
            try:
                if not isinstance(value, dict):
                    message = f"expected a JSON object, got {type(value).__name__}"
                    raise BenchmarkFormatError(path, line, message)
                record = self._record(line, value)
                qid = record.query.external_id
                if (first := seen.setdefault(qid, place)) != place:
                    message = f"duplicate id {qid!r}, first {first}"
                    raise BenchmarkFormatError(path, line, message, self.id_field)
            except BenchmarkFormatError as exc:
                if index is None:
                    raise
                detail = f"{exc.detail} (record {index})"
                raise BenchmarkFormatError(path, line, detail, exc.field) from None
            if record.skipped:
                skipped += 1
                continue
            yield record
        if skipped and (note := self._skipped(skipped)) not in self.warnings:
            self.warnings.append(note)  # once, though every pass counts them

    def documents(self) -> Iterator[Document]:
        seen: set[str] = set()
        for record in self._records():
            for para in record.paragraphs:
                if (doc_id := para.doc_id) not in seen:
                    seen.add(doc_id)
                    yield Document(doc_id, para.title, para.text)

    def duplicate_document(self) -> BenchmarkFormatError | None:
        return None  # ids are derived from the content, each yielded once

    def queries(self) -> Iterator[QueryRecord]:
        for record in self._records():
            yield record.query

    def qrels(self) -> Iterator[QrelRecord]:
        path = str(self.corpus_path)
        for record in self._records():
            grades: dict[str, int] = {}  # a paragraph repeated in one question is judged once
            for position, grade in record.judged:
                doc_id = record.paragraphs[position].doc_id
                grades[doc_id] = max(grades.get(doc_id, 0), grade)
            for doc_id, grade in grades.items():
                yield QrelRecord(record.query.external_id, doc_id, grade, path, record.line)
