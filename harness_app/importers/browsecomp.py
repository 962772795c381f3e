"""BrowseComp-Plus folders: the corpus, the decrypted queries, and their judgements."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness_app.harness.beir import DEFAULT_MAX_LINE_BYTES, iter_lines
from harness_app.harness.types import Document
from harness_app.importers.fields import identifier_field, json_object, string_field
from harness_app.importers.records import (
    BenchmarkFormatError,
    ImportRejected,
    QrelRecord,
    QueryRecord,
)

QUERY_FILES = ("queries.jsonl", "browsecomp_plus_decrypted.jsonl")
QREL_FILES = {"qrel_golds.txt": 2, "qrel_evidence.txt": 1}  # file name -> grade
QREL_FOLDERS = ("", "topics-qrels")
DOC_LISTS = {"gold_docs": 2, "evidence_docs": 1}  # a query's own lists -> grade


def browsecomp_files(folder: Path) -> list[Path]:
    """The judgement files present: qrel_golds.txt, qrel_evidence.txt, here or in topics-qrels/."""
    return [
        folder / sub / name
        for sub in QREL_FOLDERS
        for name in QREL_FILES
        if (folder / sub / name).is_file()
    ]


class BrowseCompPlusSource:
    """A BrowseComp-Plus folder as a benchmark.

    corpus.jsonl holds `docid`, `text` and optionally `title` (`url` and other fields are
    not kept). The queries (queries.jsonl or browsecomp_plus_decrypted.jsonl) hold
    `query_id`, `query`, `answer` and optionally `gold_docs` and `evidence_docs` (docids,
    or objects with a `docid`, as the decrypted file has them); `negative_docs` are not
    judgements and are ignored. TREC qrel files (qrel_golds.txt, qrel_evidence.txt) may
    add judgements. Gold documents get grade 2, evidence documents 1; a document listed
    as both is 2.
    """

    fmt = "browsecomp-plus"

    def __init__(self, folder: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        if not folder.is_dir():
            raise ImportRejected(f"{folder} is not a folder; a BrowseComp-Plus benchmark is one")
        self.corpus_path = folder / "corpus.jsonl"
        if not self.corpus_path.is_file():
            raise ImportRejected(f"BrowseComp-Plus folder {folder} has no corpus.jsonl")
        found = [folder / name for name in QUERY_FILES if (folder / name).is_file()]
        if len(found) != 1:
            problem = "has no" if not found else "has both"
            raise ImportRejected(
                f"BrowseComp-Plus folder {folder} {problem} {' or '.join(QUERY_FILES)}"
            )
        self.queries_path = found[0]
        self.qrel_files = browsecomp_files(folder)
        self.qrels_path = self.qrel_files[0] if self.qrel_files else self.queries_path
        self.max_line_bytes = max_line_bytes
        self.warnings: list[str] = []

    def _lines(self, path: Path) -> Iterator[tuple[int, str]]:
        return iter_lines(path, max_line_bytes=self.max_line_bytes)

    def _documents(self) -> Iterator[tuple[int, Document]]:
        path = self.corpus_path
        for number, line in self._lines(path):
            row = json_object(path, number, line)
            doc_id = identifier_field(path, number, row, "docid")
            title = string_field(path, number, row, "title", default="")
            yield number, Document(doc_id, title, string_field(path, number, row, "text"))

    def documents(self) -> Iterator[Document]:
        return (doc for _, doc in self._documents())

    def duplicate_document(self) -> BenchmarkFormatError | None:
        """The first repeated docid with both lines (a slow pass, run only when hashes collide)."""
        seen: dict[str, int] = {}
        for number, doc in self._documents():
            if (first := seen.setdefault(doc.doc_id, number)) != number:
                message = f"duplicate id {doc.doc_id!r} (first on line {first})"
                return BenchmarkFormatError(self.corpus_path, number, message, "docid")
        return None

    def _rows(self) -> Iterator[tuple[int, dict[str, Any], str]]:
        path = self.queries_path
        seen: dict[str, int] = {}
        for number, line in self._lines(path):
            row = json_object(path, number, line)
            query_id = identifier_field(path, number, row, "query_id")
            if (first := seen.setdefault(query_id, number)) != number:
                message = f"duplicate id {query_id!r} (first on line {first})"
                raise BenchmarkFormatError(path, number, message, "query_id")
            yield number, row, query_id

    def queries(self) -> Iterator[QueryRecord]:
        path = self.queries_path
        for number, row, query_id in self._rows():
            text = string_field(path, number, row, "query")
            answer = string_field(path, number, row, "answer")
            yield QueryRecord(query_id, text, answer, {"answer": answer})

    def qrels(self) -> Iterator[QrelRecord]:
        judged: dict[tuple[str, str], QrelRecord] = {}
        for qrel in [*self._listed_qrels(), *self._file_qrels()]:
            key = (qrel.query_id, qrel.doc_id)
            if key not in judged or judged[key].grade < qrel.grade:
                judged[key] = qrel
        return iter(judged.values())

    def _listed_qrels(self) -> Iterator[QrelRecord]:
        path = self.queries_path
        for number, row, query_id in self._rows():
            for name, grade in DOC_LISTS.items():
                for i, doc_id in enumerate(_doc_list(path, number, row, name)):
                    field = f"{name}[{i}]"
                    yield QrelRecord(query_id, doc_id, grade, str(path), number, doc_field=field)

    def _file_qrels(self) -> Iterator[QrelRecord]:
        for path in self.qrel_files:
            grade = QREL_FILES[path.name]
            for number, line in self._lines(path):
                columns = line.split()
                if len(columns) != 4:
                    message = (
                        f"expected 4 columns (query-id Q0 docid relevance), got {len(columns)}"
                    )
                    raise BenchmarkFormatError(path, number, message)
                query_id, _, doc_id, relevance = columns
                if not relevance.lstrip("-").isdigit():
                    message = f"must be an integer, got {relevance!r}"
                    raise BenchmarkFormatError(path, number, message, "relevance")
                if int(relevance) > 0:  # TREC files may list judged-irrelevant pairs as 0
                    yield QrelRecord(
                        query_id, doc_id, grade, str(path), number, "query-id", "docid"
                    )


def _doc_list(path: Path, line: int, row: dict[str, Any], name: str) -> list[str]:
    """A query's gold_docs or evidence_docs: docids, or objects with a docid."""
    value = row.get(name, [])
    if not isinstance(value, list):
        message = f"must be a list, got {type(value).__name__}"
        raise BenchmarkFormatError(path, line, message, name)
    ids = []
    for i, item in enumerate(value):
        doc_id = item.get("docid") if isinstance(item, dict) else item
        if not isinstance(doc_id, str) or not doc_id.strip():
            message = "must be a docid string or an object with a docid"
            raise BenchmarkFormatError(path, line, message, f"{name}[{i}]")
        ids.append(doc_id)
    return ids
