"""The check pass: validate every record of a source and hash its content.

An import reads its source twice. The first pass (`source_scan`, here) validates every record
and computes the content hashes without touching the database, so bad input is reported
before a single row is written and an identical re-import is recognised for free. The second
pass streams the same records into the database (services.benchmarks.benchmark_import).
Neither pass holds the corpus in memory; the check keeps one 64-bit hash per document id.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness_app.harness.retrieval.store import ContentHasher, string_hash
from harness_app.importers.records import (
    PROGRESS_EVERY,
    BenchmarkFormatError,
    ImportProgress,
    ImportRejected,
    Progress,
    QrelRecord,
    Source,
)


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
            raise qrel_error(qrel, f"unknown query {qrel.query_id!r}", qrel.query_field)
        if not _hash_present(id_hashes, string_hash(qrel.doc_id)):
            raise qrel_error(qrel, f"unknown document {qrel.doc_id!r}", qrel.doc_field)
        if (qrel.query_id, qrel.doc_id) in judged:
            raise qrel_error(
                qrel, f"{qrel.query_id!r}/{qrel.doc_id!r} is judged twice", qrel.doc_field
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
