"""Streaming construction of a BM25 index directory.

Documents are seen once. Their text goes straight to the document store on disk; what
stays in memory is the vocabulary, one length per document and the postings as compact
(term, doc, tf) arrays, 12 bytes each. At the end the postings are scattered, chunk by
chunk, into term-major arrays written through memory maps, with the BM25 weight of every
(term, doc) pair precomputed so a query only adds numbers.

Unless built with `analysis=False`, each document's query-independent analysis (sentences,
sentence weights, fingerprint, entities: analysis.py) is computed in the same pass and
stored beside the postings (analysis_store.py), so workers never compute it.

Format versions: 1, postings and documents; 2 (2026-11-23), the stored analysis and the
manifest's "analysis" field. A directory of another version is stale and gets rebuilt.
"""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.format import open_memmap

from harness_app.harness.analysis import ANALYSIS_VERSION
from harness_app.harness.retrieval import lucene
from harness_app.harness.retrieval.analysis_store import AnalysisWriter
from harness_app.harness.retrieval.store import (
    ContentHasher,
    DocumentStoreWriter,
    StringTableWriter,
    encode_document,
)
from harness_app.harness.text import ANALYZER_VERSION, analyze
from harness_app.harness.types import Document

FORMAT = "harness-bm25"
# 3: postings.max and postings.top (the bounds the pruned search needs)
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
POSTINGS_INDPTR = "postings.indptr.npy"
POSTINGS_DOCS = "postings.docs.npy"
POSTINGS_WEIGHTS = "postings.weights.npy"
POSTINGS_MAX = "postings.max.npy"
POSTINGS_TOP_INDPTR = "postings.top.indptr.npy"
POSTINGS_TOP_DOCS = "postings.top.docs.npy"
# Documents kept per term in postings.top: where the term weighs most. The pruned search
# scores them first to learn a score the top k must reach.
TOP_PER_TERM = 32

# Tokens gathered before a chunk of postings is counted; bounds the temporary arrays.
_CHUNK_TOKENS = 1 << 20

Chunk = tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]


def indexed_text(doc: Document) -> str:
    """Anserini's "flat" BEIR field: title and text as one field."""
    return f"{doc.title} {doc.text}" if doc.title else doc.text


class IndexBuilder:
    """Feed documents with `add`, then `finish` writes the postings and the manifest."""

    def __init__(self, directory: Path, *, k1: float, b: float, analysis: bool = True) -> None:
        self.directory = directory
        self.analysis = AnalysisWriter(directory) if analysis else None
        self.analysis_seconds = 0.0
        self.k1, self.b = k1, b
        self.started = time.perf_counter()
        self.store = DocumentStoreWriter(directory)
        self.hasher = ContentHasher()
        self.vocab: dict[str, int] = {}
        self.lengths = array("i")
        self._tokens = array("i")
        self._chunk_start = 0  # first document of the chunk being gathered
        self._chunks: list[Chunk] = []

    def add(self, doc: Document) -> None:
        encoded = encode_document(doc)
        self.store.append_encoded(*encoded)
        self.hasher.add_encoded(*encoded)
        terms = analyze(indexed_text(doc))
        vocab = self.vocab
        # setdefault with len(vocab) hands a new term the next free id in one dict probe
        self._tokens.extend([vocab.setdefault(t, len(vocab)) for t in terms])
        self.lengths.append(len(terms))
        if self.analysis is not None:
            started = time.perf_counter()
            self.analysis.add(doc)
            self.analysis_seconds += time.perf_counter() - started
        if len(self._tokens) >= _CHUNK_TOKENS:
            self._flush()

    def _flush(self) -> None:
        """Turn the gathered token ids into unique (term, doc, tf) triples."""
        count = len(self.lengths) - self._chunk_start
        if count == 0:
            return
        tokens = np.frombuffer(self._tokens, dtype=np.int32).astype(np.int64)
        lengths = np.frombuffer(self.lengths, dtype=np.int32)[self._chunk_start :]
        docs = np.repeat(np.arange(self._chunk_start, len(self.lengths), dtype=np.int64), lengths)
        keys, tfs = np.unique((docs << 32) | tokens, return_counts=True)
        self._chunks.append(
            (
                (keys & 0xFFFFFFFF).astype(np.int32),
                (keys >> 32).astype(np.int32),
                tfs.astype(np.int32),
            )
        )
        self._tokens = array("i")
        self._chunk_start = len(self.lengths)

    def finish(self) -> dict[str, Any]:
        """Write everything still pending; returns the manifest it wrote."""
        self._flush()
        self.store.close()
        self.store.check_unique_ids()
        if self.analysis is not None:
            self.analysis.close()
        terms = StringTableWriter(self.directory, "terms")
        terms.extend(self.vocab)  # dict order is id order
        terms.close()
        lengths = np.frombuffer(self.lengths, dtype=np.int32)
        doc_count = int(np.count_nonzero(lengths))
        total_terms = int(lengths.sum(dtype=np.int64))
        avgdl = total_terms / doc_count if doc_count else 1.0
        postings = self._write_postings(lengths, doc_count, avgdl)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "analyzer": ANALYZER_VERSION,
            "k1": self.k1,
            "b": self.b,
            "documents": len(lengths),
            "terms": len(self.vocab),
            "postings": postings,
            "doc_count": doc_count,
            "total_terms": total_terms,
            "avgdl": avgdl,
            "content_hash": self.hasher.hexdigest(),
            "analysis": ANALYSIS_VERSION if self.analysis is not None else None,
            "analysis_skipped": self.analysis.skipped if self.analysis is not None else 0,
            "build_seconds": round(time.perf_counter() - self.started, 3),
            "analysis_seconds": round(self.analysis_seconds, 3),
        }
        # The manifest goes last: a directory without one is an unfinished build.
        (self.directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest

    def _write_postings(self, lengths: npt.NDArray[np.int32], doc_count: int, avgdl: float) -> int:
        vocab_size = len(self.vocab)
        df = np.zeros(vocab_size, dtype=np.int64)
        for chunk_terms, _, _ in self._chunks:
            df += np.bincount(chunk_terms, minlength=vocab_size)
        indptr = np.zeros(vocab_size + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        total = int(indptr[-1])
        np.save(self.directory / POSTINGS_INDPTR, indptr)
        term_idf = lucene.idf(df, doc_count)
        doc_norms = lucene.norm_table(self.k1, self.b, avgdl)[lucene.encode_lengths(lengths)]
        out_docs = open_memmap(self.directory / POSTINGS_DOCS, "w+", np.int32, (total,))
        out_weights = open_memmap(self.directory / POSTINGS_WEIGHTS, "w+", np.float32, (total,))
        cursor = indptr[:-1].copy()  # next free slot in each term's row
        while self._chunks:
            chunk_terms, chunk_docs, tfs = self._chunks.pop(0)
            order = np.argsort(chunk_terms, kind="stable")  # stable keeps docs ascending
            t, d, tf = chunk_terms[order], chunk_docs[order], tfs[order]
            run_starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
            run_lengths = np.diff(np.r_[run_starts, len(t)])
            rank_in_run = np.arange(len(t)) - np.repeat(run_starts, run_lengths)
            slots = cursor[t] + rank_in_run
            out_docs[slots] = d
            out_weights[slots] = lucene.term_weights(tf, doc_norms[d], term_idf[t])
            cursor[t[run_starts]] += run_lengths
        out_docs.flush()
        out_weights.flush()
        _write_bounds(self.directory, indptr, out_docs, out_weights)
        del out_docs, out_weights
        return total


def _write_bounds(directory: Path, indptr: Any, docs: Any, weights: Any) -> None:
    """Each term's largest weight, and the documents where it weighs most (TOP_PER_TERM).

    Both depend on k1 and b through the weights, so they are built with them.
    """
    df = np.diff(indptr)
    starts = indptr[:-1]
    maxes = np.maximum.reduceat(weights, starts) if len(starts) and len(weights) else weights[:0]
    np.save(directory / POSTINGS_MAX, np.asarray(maxes, dtype=np.float32))
    kept = np.minimum(df, TOP_PER_TERM)
    top_indptr = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(kept, out=top_indptr[1:])
    top_docs = np.empty(int(top_indptr[-1]), dtype=np.int32)
    # Short rows are kept whole: one gather for all of them.
    short = np.flatnonzero(df <= TOP_PER_TERM)
    lengths = df[short]
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    source = np.repeat(starts[short], lengths) + offsets
    target = np.repeat(top_indptr[short], lengths) + offsets
    top_docs[target] = docs[source]
    for term in np.flatnonzero(df > TOP_PER_TERM).tolist():
        start, end = int(starts[term]), int(indptr[term + 1])
        best = np.argpartition(weights[start:end], end - start - TOP_PER_TERM)
        top = np.sort(best[end - start - TOP_PER_TERM :])
        top_docs[top_indptr[term] : top_indptr[term + 1]] = docs[start:end][top]
    np.save(directory / POSTINGS_TOP_INDPTR, top_indptr)
    np.save(directory / POSTINGS_TOP_DOCS, top_docs)
