"""BEIR folders: corpus.jsonl, queries.jsonl and qrels/<split>.tsv."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from harness_app.harness.beir import DEFAULT_MAX_LINE_BYTES, QRELS_HEADER, iter_lines
from harness_app.harness.types import Document
from harness_app.importers.fields import (
    answer_text,
    grade_field,
    identifier_field,
    json_object,
    metadata_field,
    string_field,
)
from harness_app.importers.records import (
    BenchmarkFormatError,
    ImportRejected,
    QrelRecord,
    QueryRecord,
)


class BeirSource:
    fmt = "beir"

    def __init__(self, folder: Path, split: str, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        self.folder = folder
        self.corpus_path = folder / "corpus.jsonl"
        self.queries_path = folder / "queries.jsonl"
        self.qrels_path = folder / "qrels" / f"{split}.tsv"
        self.max_line_bytes = max_line_bytes
        self.warnings: list[str] = []
        for path in (self.corpus_path, self.queries_path, self.qrels_path):
            if not path.is_file():
                raise ImportRejected(f"BEIR folder {folder} has no {path.relative_to(folder)}")

    def _lines(self, path: Path) -> Iterator[tuple[int, str]]:
        return iter_lines(path, max_line_bytes=self.max_line_bytes)

    def _documents(self) -> Iterator[tuple[int, Document]]:
        path = self.corpus_path
        for number, line in self._lines(path):
            row = json_object(path, number, line)
            doc_id = identifier_field(path, number, row, "_id")
            title = string_field(path, number, row, "title", default="")
            yield number, Document(doc_id, title, string_field(path, number, row, "text"))

    def documents(self) -> Iterator[Document]:
        return (doc for _, doc in self._documents())

    def duplicate_document(self) -> BenchmarkFormatError | None:
        """The first repeated id with both lines (a slow pass, run only when hashes collide)."""
        seen: dict[str, int] = {}
        for number, doc in self._documents():
            first = seen.setdefault(doc.doc_id, number)
            if first != number:
                message = f"duplicate id {doc.doc_id!r} (first on line {first})"
                return BenchmarkFormatError(self.corpus_path, number, message, "_id")
        return None

    def queries(self) -> Iterator[QueryRecord]:
        path = self.queries_path
        seen: dict[str, int] = {}
        for number, line in self._lines(path):
            row = json_object(path, number, line)
            query_id = identifier_field(path, number, row, "_id")
            if (first := seen.setdefault(query_id, number)) != number:
                message = f"duplicate id {query_id!r} (first on line {first})"
                raise BenchmarkFormatError(path, number, message, "_id")
            text = string_field(path, number, row, "text")
            metadata = metadata_field(path, number, row)
            yield QueryRecord(query_id, text, answer_text(metadata), metadata)

    def qrels(self) -> Iterator[QrelRecord]:
        path = self.qrels_path
        for number, line in self._lines(path):
            columns = line.rstrip("\r\n").split("\t")
            if number == 1 and tuple(c.strip() for c in columns) == QRELS_HEADER:
                continue
            if len(columns) != 3:
                message = f"expected 3 tab-separated columns, got {len(columns)}"
                raise BenchmarkFormatError(path, number, message)
            query_id, doc_id, score = columns
            for name, value in (("query-id", query_id), ("corpus-id", doc_id)):
                if not value.strip():
                    raise BenchmarkFormatError(path, number, "is blank", name)
            yield QrelRecord(query_id, doc_id, grade_field(path, number, score), str(path), number)
