"""Benchmark sources: BEIR folders, HotpotQA JSON and uploaded zips, read and checked.

An import reads its source twice. The first pass (`source_scan`, here) validates every record
and computes the content hashes without touching the database, so bad input is reported
before a single row is written and an identical re-import is recognised for free. The second
pass streams the same records into the database (services.benchmark_import). Neither pass
holds the corpus in memory; the check keeps one 64-bit hash per document id.

Line-level reading (length limit, UTF-8, BOM) comes from harness.beir.iter_lines; record
validation lives here because the importer also rejects what the database cannot store
(NUL characters, lone surrogates) and needs the line of every record for its messages.
Nothing in this module writes to the database.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
import shutil
import time
import zipfile
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import numpy as np

from harness_app.harness.beir import (
    DEFAULT_MAX_LINE_BYTES,
    QRELS_HEADER,
    BeirFormatError,
    iter_lines,
)
from harness_app.harness.retrieval.store import ContentHasher, string_hash
from harness_app.harness.types import Document

PROGRESS_EVERY = 2_000
MAX_RECORD_BYTES = 16 * 1024 * 1024  # one HotpotQA question with its context is ~5 KB
MAX_UNZIPPED_BYTES = 8 * 1024**3
READ_CHUNK = 1024 * 1024
MAX_GRADE = 32767  # a small integer column
_BLANK = re.compile(r"[ \t\r\n]*")
SPLIT_PATTERN = r"\A[A-Za-z0-9_-][A-Za-z0-9_.-]*\Z"  # it names a file: qrels/<split>.tsv


class ImportRejected(Exception):
    """The import was refused before or while writing; the database is unchanged."""


class BenchmarkFormatError(BeirFormatError):
    """A benchmark file is malformed; the message names the file, line and field."""

    def __init__(self, path: Path | str, line: int, message: str, field: str = "") -> None:
        self.detail = message
        super().__init__(path, line, message, field)


@dataclass(frozen=True, slots=True)
class QueryRecord:
    external_id: str
    text: str
    answer: str
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class QrelRecord:
    query_id: str
    doc_id: str
    grade: int
    path: str  # where the judgement came from, for error messages
    line: int


@dataclass
class ImportProgress:
    phase: str  # "checking" (validate and hash) or "writing"
    documents: int = 0
    total_documents: int = 0  # known once the check pass is over
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        """Documents per second in this phase."""
        return self.documents / max(time.monotonic() - self.started, 1e-9)


Progress = Callable[[ImportProgress], None]


class Source(Protocol):
    """One benchmark's records; each method opens a fresh pass over the files."""

    fmt: str
    corpus_path: Path
    queries_path: Path
    qrels_path: Path
    warnings: list[str]

    def documents(self) -> Iterator[Document]: ...

    def queries(self) -> Iterator[QueryRecord]: ...

    def qrels(self) -> Iterator[QrelRecord]: ...

    def duplicate_document(self) -> BenchmarkFormatError | None: ...


# --- field checks shared by the readers -------------------------------------------------


def _storable(path: Path | str, line: int, name: str, value: str) -> str:
    """`value` unless PostgreSQL could not store it (NUL, lone surrogate)."""
    if "\x00" in value:
        raise BenchmarkFormatError(path, line, "contains a NUL character", name)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            char = f"U+{ord(value[exc.start]):04X}"
            raise BenchmarkFormatError(
                path, line, f"contains a lone surrogate {char}", name
            ) from None
    return value


def _text(
    path: Path | str, line: int, row: dict[str, Any], name: str, default: str | None = None
) -> str:
    if name not in row:
        if default is None:
            raise BenchmarkFormatError(path, line, "missing", name)
        return default
    value = row[name]
    if not isinstance(value, str):
        raise BenchmarkFormatError(
            path, line, f"must be a string, got {type(value).__name__}", name
        )
    return _storable(path, line, name, value)


def _identifier(path: Path | str, line: int, row: dict[str, Any], name: str) -> str:
    value = _text(path, line, row, name)
    if not value.strip():
        raise BenchmarkFormatError(path, line, "is blank", name)
    if len(value) > 500:
        raise BenchmarkFormatError(path, line, "is longer than 500 characters", name)
    return value


def _json_object(path: Path | str, line: int, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkFormatError(
            path, line, f"malformed JSON: {exc.msg} at column {exc.colno}"
        ) from None
    if not isinstance(value, dict):
        raise BenchmarkFormatError(
            path, line, f"expected a JSON object, got {type(value).__name__}"
        )
    return value


def _metadata(path: Path | str, line: int, row: dict[str, Any]) -> dict[str, Any]:
    metadata = row.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        message = f"must be an object, got {type(metadata).__name__}"
        raise BenchmarkFormatError(path, line, message, "metadata")
    for text in _json_strings(metadata):  # a JSON column can't hold them either
        _storable(path, line, "metadata", text)
    return metadata


def _json_strings(value: Any) -> Iterator[str]:
    """Every string in a parsed JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)


def _grade(path: Path | str, line: int, score: str) -> int:
    score = score.strip()
    if not (score.isascii() and score.isdigit() and int(score) <= MAX_GRADE):
        message = f"must be an integer from 0 to {MAX_GRADE}, got {score!r}"
        raise BenchmarkFormatError(path, line, message, "score")
    return int(score)


def answer_text(metadata: dict[str, Any]) -> str:
    """metadata["answer"] as one string; a list of aliases is joined with " | "."""
    answer = metadata.get("answer", "")
    if isinstance(answer, list):
        return " | ".join(str(a) for a in answer)
    return "" if answer is None else str(answer)


# --- BEIR folders -----------------------------------------------------------------------


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
            row = _json_object(path, number, line)
            doc_id = _identifier(path, number, row, "_id")
            title = _text(path, number, row, "title", default="")
            yield number, Document(doc_id, title, _text(path, number, row, "text"))

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
            row = _json_object(path, number, line)
            query_id = _identifier(path, number, row, "_id")
            if (first := seen.setdefault(query_id, number)) != number:
                message = f"duplicate id {query_id!r} (first on line {first})"
                raise BenchmarkFormatError(path, number, message, "_id")
            text = _text(path, number, row, "text")
            metadata = _metadata(path, number, row)
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
            yield QrelRecord(query_id, doc_id, _grade(path, number, score), str(path), number)


# --- HotpotQA JSON ----------------------------------------------------------------------


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
        answer = _text(path, line, value, "answer")
        metadata = {"answer": answer} | {k: value[k] for k in ("type", "level") if k in value}
        return HotpotRecord(
            line=line,
            index=index,
            qid=_identifier(path, line, value, "_id"),
            question=_text(path, line, value, "question"),
            answer=answer,
            metadata=_metadata(path, line, {"metadata": metadata}),
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
        text = _storable(path, line, name, "".join(sentences))
        paragraphs.append((_storable(path, line, name, title), text))
    return tuple(paragraphs)


def _hotpot_grade(record: HotpotRecord, title: str) -> int:
    answer = record.answer.strip().lower()
    if answer in ("yes", "no"):
        return 2
    text = next((f"{t} {body}" for t, body in record.context if t == title), "")
    return 2 if answer and answer in text.lower() else 1


# --- uploads ----------------------------------------------------------------------------


def source_open(path: Path, *, fmt: str, split: str) -> Source:
    if not re.match(SPLIT_PATTERN, split):
        raise ImportRejected(f"split {split!r}: use letters, digits, '.', '_' or '-'")
    if fmt == "beir":
        if not path.is_dir():
            raise ImportRejected(f"{path} is not a folder; a BEIR benchmark is a folder")
        return BeirSource(path, split)
    if fmt == "hotpotqa":
        return HotpotQASource(path)
    raise ImportRejected(f"unknown format {fmt!r}; use beir or hotpotqa")


def zip_unpack(archive: Path, destination: Path) -> Path:
    """Extract the BEIR files of a zip into `destination`; returns the BEIR folder.

    The folder is wherever the shallowest corpus.jsonl sits. Only corpus.jsonl,
    queries.jsonl and qrels/*.tsv are written, names are checked so nothing lands outside
    `destination`, and the total is capped whatever the zip headers claim.
    """
    try:
        with zipfile.ZipFile(archive) as bundle:
            root = _zip_root(bundle)
            budget = MAX_UNZIPPED_BYTES
            for info in bundle.infolist():
                relative = _zip_member(info, root)
                if relative is not None:
                    budget = _zip_extract(bundle, info, destination / relative, budget)
    except zipfile.BadZipFile as exc:
        raise ImportRejected(f"{archive.name} is not a readable zip file ({exc})") from None
    return destination


def _zip_root(bundle: zipfile.ZipFile) -> PurePosixPath:
    corpora = [
        PurePosixPath(n) for n in bundle.namelist() if PurePosixPath(n).name == "corpus.jsonl"
    ]
    if not corpora:
        raise ImportRejected("the zip holds no corpus.jsonl (expected a BEIR folder)")
    return min(corpora, key=lambda p: len(p.parts)).parent


def _zip_member(info: zipfile.ZipInfo, root: PurePosixPath) -> PurePosixPath | None:
    name = PurePosixPath(info.filename)
    if info.is_dir() or name.is_absolute() or ".." in name.parts:
        return None
    try:
        relative = name.relative_to(root)
    except ValueError:
        return None
    wanted = relative.parts in (("corpus.jsonl",), ("queries.jsonl",)) or (
        len(relative.parts) == 2 and relative.parts[0] == "qrels" and relative.suffix == ".tsv"
    )
    return relative if wanted else None


def _zip_extract(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int) -> int:
    target.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open(info) as source, open(target, "wb") as sink:
        while chunk := source.read(READ_CHUNK):
            budget -= len(chunk)
            if budget < 0:
                raise ImportRejected(f"the zip unpacks to more than {MAX_UNZIPPED_BYTES} bytes")
            sink.write(chunk)
    return budget


def upload_source_path(upload: Path, workdir: Path) -> tuple[Path, str]:
    """(path to import, format) for an uploaded file: a zip is a BEIR folder, .json HotpotQA."""
    suffix = upload.suffix.lower()
    if suffix == ".zip":
        if workdir.exists():
            shutil.rmtree(workdir)  # a retried job starts from a clean folder
        return zip_unpack(upload, workdir), "beir"
    if suffix == ".json":
        return upload, "hotpotqa"
    raise ImportRejected(f"{upload.name}: upload a .zip of a BEIR folder or a HotpotQA .json")


# --- the check pass ---------------------------------------------------------------------


@dataclass(frozen=True)
class ScanResult:
    corpus_hash: str
    benchmark_hash: str
    documents: int
    queries: int
    qrels: int


class _BenchmarkHasher:
    """sha256 over the corpus hash, the split, then every query and qrel in order."""

    def __init__(self, corpus_hash: str, split: str) -> None:
        self._sha = hashlib.sha256(b"harness-benchmark-v1")
        self.add(corpus_hash, split)

    def add(self, *fields: str) -> None:
        for value in fields:
            encoded = value.encode("utf-8")
            self._sha.update(len(encoded).to_bytes(8, "little"))
            self._sha.update(encoded)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def source_scan(source: Source, *, split: str, progress: Progress | None = None) -> ScanResult:
    """Validate every record and hash the content; raises on the first problem."""
    state = ImportProgress(phase="checking")
    corpus_hash, id_hashes = _scan_documents(source, state, progress)
    hasher = _BenchmarkHasher(corpus_hash, split)
    query_ids = _scan_queries(source, hasher)
    qrels = _scan_qrels(source, hasher, query_ids, id_hashes)
    return ScanResult(corpus_hash, hasher.hexdigest(), len(id_hashes), len(query_ids), qrels)


def _scan_documents(
    source: Source, state: ImportProgress, progress: Progress | None
) -> tuple[str, np.ndarray[Any, np.dtype[np.uint64]]]:
    hasher = ContentHasher()
    hashes = array("Q")
    for doc in source.documents():
        hasher.add(doc)
        hashes.append(string_hash(doc.doc_id))
        if progress and len(hashes) % PROGRESS_EVERY == 0:
            state.documents = len(hashes)
            progress(state)
    if not hashes:
        raise ImportRejected(f"{source.corpus_path}: the corpus has no documents")
    state.documents = len(hashes)
    if progress:
        progress(state)
    ordered = np.sort(np.frombuffer(hashes, dtype=np.uint64))
    if np.any(ordered[1:] == ordered[:-1]) and (duplicate := source.duplicate_document()):
        raise duplicate
    return hasher.hexdigest(), ordered


def _scan_queries(source: Source, hasher: _BenchmarkHasher) -> set[str]:
    seen: set[str] = set()
    for query in source.queries():  # each source rejects duplicate ids with their line
        seen.add(query.external_id)
        metadata = json.dumps(query.metadata, sort_keys=True, ensure_ascii=False)
        hasher.add(query.external_id, query.text, query.answer, metadata)
    if not seen:
        raise ImportRejected(f"{source.queries_path}: no queries")
    return seen


def _scan_qrels(
    source: Source,
    hasher: _BenchmarkHasher,
    query_ids: set[str],
    id_hashes: np.ndarray[Any, np.dtype[np.uint64]],
) -> int:
    judged: set[tuple[str, str]] = set()
    for qrel in source.qrels():
        if qrel.query_id not in query_ids:
            raise qrel_error(qrel, f"unknown query {qrel.query_id!r}", "query-id")
        if not _hash_present(id_hashes, string_hash(qrel.doc_id)):
            raise qrel_error(qrel, f"unknown document {qrel.doc_id!r}", "corpus-id")
        if (qrel.query_id, qrel.doc_id) in judged:
            raise qrel_error(
                qrel, f"{qrel.query_id!r}/{qrel.doc_id!r} is judged twice", "corpus-id"
            )
        judged.add((qrel.query_id, qrel.doc_id))
        hasher.add(qrel.query_id, qrel.doc_id, str(qrel.grade))
    if not judged:
        raise ImportRejected(f"{source.qrels_path}: no judgements")
    return len(judged)


def qrel_error(qrel: QrelRecord, message: str, name: str) -> BenchmarkFormatError:
    return BenchmarkFormatError(qrel.path, qrel.line, message, name)


def _hash_present(ordered: np.ndarray[Any, np.dtype[np.uint64]], value: int) -> bool:
    at = int(np.searchsorted(ordered, np.uint64(value)))
    return at < len(ordered) and int(ordered[at]) == value
