"""The official HotpotQA JSON (distractor or fullwiki), read one question at a time."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_app.harness.types import Document
from harness_app.importers.fields import identifier_field, metadata_field, storable, string_field
from harness_app.importers.records import (
    BenchmarkFormatError,
    ImportRejected,
    QrelRecord,
    QueryRecord,
)

MAX_RECORD_BYTES = 16 * 1024 * 1024  # one HotpotQA question with its context is ~5 KB
READ_CHUNK = 1024 * 1024
_BLANK = re.compile(r"[ \t\r\n]*")


def hotpotqa_doc_id(title: str) -> str:
    """Title with each run of non-alphanumerics turned into one "_" (as in shared/data)."""
    return re.sub(r"[^0-9A-Za-z]+", "_", title).strip("_") or "untitled"


class JsonArrayReader:
    """Yields (line, index, element) for each element of a file's top-level JSON array.

    The file is decoded in chunks and each element is parsed with raw_decode as soon as it
    is complete, so memory holds one chunk plus one element, never the whole array.
    """

    def __init__(self, path: Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        self.path = path
        self.max_record = max_record_bytes
        self.json = json.JSONDecoder()

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        with open(self.path, "rb") as handle:
            self._handle = handle
            self._utf8 = codecs.getincrementaldecoder("utf-8")()
            self.buf, self.pos, self.line, self.eof, self.offset = "", 0, 1, False, 0
            yield from self._elements()

    def _error(self, message: str, line: int | None = None) -> BenchmarkFormatError:
        return BenchmarkFormatError(self.path, line or self.line, message)

    def _more(self) -> bool:
        if self.eof:
            return False
        raw = self._handle.read(READ_CHUNK)
        self.eof = not raw
        try:
            text = self._utf8.decode(raw, final=self.eof)
        except UnicodeDecodeError as exc:
            where = self.line + self.buf.count("\n", self.pos)
            raise self._error(f"not valid UTF-8 (byte {self.offset + exc.start})", where) from None
        self.offset += len(raw)
        self.buf = self.buf[self.pos :] + text
        self.pos = 0
        return True

    def _peek(self) -> str:
        """The next non-blank character ("" at the end), counting the lines skipped."""
        while True:
            match = _BLANK.match(self.buf, self.pos)
            end = match.end() if match else self.pos
            self.line += self.buf.count("\n", self.pos, end)
            self.pos = end
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def _elements(self) -> Iterator[tuple[int, int, Any]]:
        if self._peek() != "[":
            raise self._error("expected a JSON array of questions")
        self.pos += 1
        index = 0
        while (char := self._peek()) != "]":
            if index and char != ",":
                raise self._error(
                    "expected ',' or ']' after a record" if char else "ends inside the array"
                )
            if index:
                self.pos += 1
                self._peek()
            line = self.line
            yield line, index, self._decode()
            index += 1
        self.pos += 1
        if self._peek():
            raise self._error("unexpected text after the closing ']'")

    def _decode(self) -> Any:
        while True:
            try:
                value, end = self.json.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.buf) - self.pos > self.max_record or not self._more():
                    limit = f" (or a record longer than {self.max_record} bytes)"
                    line = self.line + self.buf.count("\n", self.pos, exc.pos)
                    raise self._error(f"malformed JSON: {exc.msg}{limit}", line) from None
                continue
            self.line += self.buf.count("\n", self.pos, end)
            self.pos = end
            return value


@dataclass(frozen=True, slots=True)
class HotpotRecord:
    line: int
    index: int
    qid: str
    question: str
    answer: str
    metadata: dict[str, Any]
    supporting: tuple[str, ...]  # titles, in order, each once
    context: tuple[tuple[str, str], ...]  # (title, text)


class HotpotQASource:
    """The official HotpotQA JSON (distractor or fullwiki) as a benchmark.

    Corpus = the union of the context paragraphs in first-seen order; a title seen again
    keeps its first text. Qrels come from supporting_facts: grade 2 for a supporting
    paragraph that contains the answer (or every supporting paragraph of a yes/no
    question), 1 for the others. Supporting titles absent from the whole corpus (common in
    the fullwiki setting) are left out with a warning.
    """

    fmt = "hotpotqa"

    def __init__(self, path: Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        if not path.is_file():
            raise ImportRejected(f"no HotpotQA file at {path}")
        # one file holds everything; the three paths keep messages uniform across formats
        self.corpus_path = self.queries_path = self.qrels_path = path
        self.max_record_bytes = max_record_bytes
        self.warnings: list[str] = []
        self._ids: dict[str, tuple[str, int, int]] | None = None  # title -> (id, record, slot)

    def _records(self) -> Iterator[HotpotRecord]:
        reader = JsonArrayReader(self.corpus_path, max_record_bytes=self.max_record_bytes)
        seen: dict[str, int] = {}
        for line, index, value in reader:
            try:
                record = self._record(line, index, value)
            except BenchmarkFormatError as exc:  # say which record: the file is often one line
                raise self._fail(line, index, exc.detail, exc.field) from None
            if (first := seen.setdefault(record.qid, index)) != index:
                message = f"duplicate id {record.qid!r}, first in record {first}"
                raise self._fail(line, index, message, "_id")
            yield record

    def _fail(self, line: int, index: int, message: str, name: str) -> BenchmarkFormatError:
        return BenchmarkFormatError(self.corpus_path, line, f"{message} (record {index})", name)

    def _record(self, line: int, index: int, value: Any) -> HotpotRecord:
        path = self.corpus_path
        if not isinstance(value, dict):
            raise BenchmarkFormatError(path, line, "expected a JSON object")
        answer = string_field(path, line, value, "answer")
        metadata = {"answer": answer} | {k: value[k] for k in ("type", "level") if k in value}
        return HotpotRecord(
            line=line,
            index=index,
            qid=identifier_field(path, line, value, "_id"),
            question=string_field(path, line, value, "question"),
            answer=answer,
            metadata=metadata_field(path, line, {"metadata": metadata}),
            supporting=_hotpot_supporting(path, line, value.get("supporting_facts")),
            context=_hotpot_context(path, line, value.get("context")),
        )

    def documents(self) -> Iterator[Document]:
        first_pass = self._ids is None
        ids = {} if self._ids is None else self._ids
        taken: set[str] = set()
        for record in self._records():
            for slot, (title, text) in enumerate(record.context):
                if first_pass and title not in ids:
                    ids[title] = (self._new_id(title, taken), record.index, slot)
                doc_id, first_record, first_slot = ids[title]
                if (first_record, first_slot) == (record.index, slot):
                    yield Document(doc_id, title, text)
        self._ids = ids

    @staticmethod
    def _new_id(title: str, taken: set[str]) -> str:
        base = candidate = hotpotqa_doc_id(title)
        n = 1
        while candidate in taken:  # two titles that differ only in punctuation
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate)
        return candidate

    def duplicate_document(self) -> BenchmarkFormatError | None:
        return None  # ids are assigned here, uniquely

    def queries(self) -> Iterator[QueryRecord]:
        for record in self._records():
            yield QueryRecord(record.qid, record.question, record.answer, record.metadata)

    def qrels(self) -> Iterator[QrelRecord]:
        if self._ids is None:
            for _ in self.documents():  # the title -> id map needs the whole union
                pass
        assert self._ids is not None
        missing = 0
        for record in self._records():
            for title in record.supporting:
                if title not in self._ids:
                    missing += 1
                    continue
                grade = _hotpot_grade(record, title)
                yield QrelRecord(
                    record.qid, self._ids[title][0], grade, str(self.corpus_path), record.line
                )
        if missing and not self.warnings:  # once, though every pass finds them
            self.warnings.append(
                f"{missing} supporting paragraph(s) are not in any question's context "
                "(fullwiki setting?); those judgements were left out"
            )


def _hotpot_supporting(path: Path, line: int, facts: Any) -> tuple[str, ...]:
    """The supporting titles in order, each once."""
    if not isinstance(facts, list):
        raise BenchmarkFormatError(path, line, "must be a list", "supporting_facts")
    titles: dict[str, None] = {}
    for i, fact in enumerate(facts):
        name = f"supporting_facts[{i}]"
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
            raise BenchmarkFormatError(path, line, "must be [title, sentence index]", name)
        if not isinstance(fact[1], int):
            raise BenchmarkFormatError(path, line, "sentence index must be an integer", name)
        titles[fact[0]] = None
    return tuple(titles)


def _hotpot_context(path: Path, line: int, context: Any) -> tuple[tuple[str, str], ...]:
    """(title, text) per paragraph; sentences carry their own leading spaces, so join with ""."""
    if not isinstance(context, list):
        raise BenchmarkFormatError(path, line, "must be a list", "context")
    paragraphs = []
    for i, item in enumerate(context):
        name = f"context[{i}]"
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise BenchmarkFormatError(path, line, "must be [title, [sentences]]", name)
        title, sentences = item
        if len(title) > 500:  # it becomes the document id
            raise BenchmarkFormatError(path, line, "title is longer than 500 characters", name)
        if not (isinstance(sentences, list) and all(isinstance(s, str) for s in sentences)):
            raise BenchmarkFormatError(path, line, "sentences must be a list of strings", name)
        text = storable(path, line, name, "".join(sentences))
        paragraphs.append((storable(path, line, name, title), text))
    return tuple(paragraphs)


def _hotpot_grade(record: HotpotRecord, title: str) -> int:
    answer = record.answer.strip().lower()
    if answer in ("yes", "no"):
        return 2
    text = next((f"{t} {body}" for t, body in record.context if t == title), "")
    return 2 if answer and answer in text.lower() else 1
