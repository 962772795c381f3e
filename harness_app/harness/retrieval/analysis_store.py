"""The per-document analysis stored with a BM25 index, and the lazy reader the harness uses.

Written by the index builder (one `add` per document, in corpus order), read through
memory maps like the rest of the index. Files, all prefixed `analysis.`:

    table.npy        int64 (N, 14): one row per document, the ranges below (see _COLUMNS)
    spans.npy        int32 (S, 2): sentence (start, end) character offsets into the text
    shingles.npy     uint32: each document's 3-word shingle hashes (dedup)
    signatures.npy   uint32 (N, 64): MinHash signatures (dedup's LSH bands)
    indptr.npy       int32: per document, its sentence-weight rows, relative to its first
    sentence_ids.npy int32, weights.npy float64: the (sentence, BM25 weight) pairs
    terms.bin        per document, its sentence terms (one per weight row) joined by " "
    entities.bin     per document, its entities: kind digit + key + US + label, joined by RS

A document whose analysis can't be stored faithfully (an entity or term containing a
separator; never seen in practice) gets text length -1 in the table, and the harness
computes its analysis instead. Nothing here decides anything: every value is what
analysis.py computes, so stored and computed analyses agree exactly.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from harness_app.harness.analysis import (
    entities_uncached,
    fingerprint_uncached,
    sentence_spans,
    sentence_weights_uncached,
)
from harness_app.harness.compress import (
    SentenceView,
    SentenceWeights,
    rank_sentences,
    render,
    with_title_fallback,
)
from harness_app.harness.dedup import NUM_PERM, Fingerprint, bands_of
from harness_app.harness.graph import ENTITY_KINDS, Mention
from harness_app.harness.retrieval.store import load_array, open_blob
from harness_app.harness.types import Document

PREFIX = "analysis."
_RS, _US = "\x1e", "\x1f"
_KIND_CODE = {kind: str(i) for i, kind in enumerate(ENTITY_KINDS)}
_KIND_OF_CODE = {code: kind for kind, code in _KIND_CODE.items()}
# Columns of the table: text length (-1: not stored), word count, then [start, end) ranges.
_COLUMNS = (
    "text_chars",
    "n_words",
    "spans_start",
    "spans_end",
    "shingles_start",
    "shingles_end",
    "indptr_start",
    "indptr_end",
    "pairs_start",
    "pairs_end",
    "terms_start",
    "terms_end",
    "entities_start",
    "entities_end",
)
# Compressed views remembered per document (the samples of a GRPO group repeat queries).
_COMPRESSED_PER_DOC = 8
_ARRAYS = ("spans", "shingles", "signatures", "indptr", "sentence_ids", "weights")


class AnalysisWriter:
    """Analyses each added document and appends it to the files; `close` writes the arrays."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._table = array("q")
        self._spans = array("i")
        self._shingles = array("I")
        self._signatures = array("I")
        self._indptr = array("i")
        self._sentence_ids = array("i")
        self._weights = array("d")
        self._terms: BinaryIO = open(directory / f"{PREFIX}terms.bin", "wb")  # noqa: SIM115
        self._entities: BinaryIO = open(directory / f"{PREFIX}entities.bin", "wb")  # noqa: SIM115
        self._terms_size = self._entities_size = 0
        self.stored = self.skipped = 0

    def add(self, doc: Document) -> None:
        fp = fingerprint_uncached(doc)
        self._signatures.frombytes(b"".join(band[1:] for band in fp.bands))
        spans = sentence_spans(doc.text)
        weights = sentence_weights_uncached(doc)
        mentions = entities_uncached(doc)
        terms = " ".join(weights.rows)
        entities = _RS.join(f"{_KIND_CODE[m.kind]}{m.key}{_US}{m.label}" for m in mentions)
        faithful = all(" " not in t for t in weights.rows) and all(
            _RS not in f and _US not in f for m in mentions for f in (m.key, m.label)
        )
        if not faithful:
            self._table.extend([-1] + [0] * (len(_COLUMNS) - 1))
            self.skipped += 1
            return
        row = [len(doc.text), fp.n_words]
        row += _append(self._spans, [i for span in spans for i in span], 2)
        row += _append(self._shingles, sorted(fp.shingles))
        row += _append(self._indptr, weights.indptr)
        row += _append(self._sentence_ids, weights.sentences)  # weights share this range
        self._weights.extend(weights.weights)
        encoded_terms = terms.encode("utf-8", "surrogatepass")
        self._terms.write(encoded_terms)
        row += [self._terms_size, self._terms_size + len(encoded_terms)]
        self._terms_size += len(encoded_terms)
        encoded_entities = entities.encode("utf-8", "surrogatepass")
        self._entities.write(encoded_entities)
        row += [self._entities_size, self._entities_size + len(encoded_entities)]
        self._entities_size += len(encoded_entities)
        self._table.extend(row)
        self.stored += 1

    def close(self) -> None:
        self._terms.close()
        self._entities.close()
        width = len(_COLUMNS)
        arrays: dict[str, Any] = {
            "table": np.frombuffer(self._table, np.int64).reshape(-1, width),
            "spans": np.frombuffer(self._spans, np.int32).reshape(-1, 2),
            "shingles": np.frombuffer(self._shingles, np.uint32),
            "signatures": np.frombuffer(self._signatures, np.uint32).reshape(-1, NUM_PERM),
            "indptr": np.frombuffer(self._indptr, np.int32),
            "sentence_ids": np.frombuffer(self._sentence_ids, np.int32),
            "weights": np.frombuffer(self._weights, np.float64),
        }
        for name, values in arrays.items():
            np.save(self.directory / f"{PREFIX}{name}.npy", values)


def _append(store: array[Any], values: Iterable[int], width: int = 1) -> list[int]:
    """Extend `store`; the [start, end) range of what was added, in items of `width`."""
    start = len(store) // width
    store.extend(values)
    return [start, len(store) // width]


class AnalysisStore:
    """Read side: `get(position, doc)` gives a lazy `StoredAnalysis`, or None."""

    def __init__(self, directory: Path, documents: int) -> None:
        arrays = {name: load_array(directory / f"{PREFIX}{name}.npy") for name in _ARRAYS}
        self.table = load_array(directory / f"{PREFIX}table.npy")
        self.spans = arrays["spans"]
        self.shingles = arrays["shingles"]
        self.signatures = arrays["signatures"]
        self.indptr = arrays["indptr"]
        self.sentence_ids = arrays["sentence_ids"]
        self.weights = arrays["weights"]
        self.terms = open_blob(directory / f"{PREFIX}terms.bin")
        self.entities = open_blob(directory / f"{PREFIX}entities.bin")
        if self.table.shape != (documents, len(_COLUMNS)) or len(self.signatures) != documents:
            raise ValueError("the stored analysis does not have one row per document")

    def get(self, position: int, doc: Document) -> StoredAnalysis | None:
        row = self.table[position].tolist()
        if row[0] != len(doc.text):  # -1 (not stored) or, defensively, other content
            return None
        return StoredAnalysis(self, position, row, doc)


class StoredAnalysis:
    """One document's stored analysis, decoded part by part as the harness asks."""

    __slots__ = (
        "_compressed",
        "_doc",
        "_entities",
        "_fingerprint",
        "_position",
        "_row",
        "_sentences",
        "_store",
        "_weights",
    )

    def __init__(self, store: AnalysisStore, position: int, row: list[int], doc: Document):
        self._store = store
        self._position = position
        self._row = row
        self._doc = doc
        self._sentences: tuple[str, ...] | None = None
        self._weights: SentenceWeights | None = None
        self._fingerprint: Fingerprint | None = None
        self._compressed: dict[tuple[str, int, int], str] = {}
        self._entities: tuple[Mention, ...] | None = None

    def sentences(self) -> tuple[str, ...]:
        if self._sentences is None:
            start, end = self._row[2:4]
            text = self._doc.text
            spans = self._store.spans[start:end].tolist()
            self._sentences = with_title_fallback([text[a:b] for a, b in spans], self._doc.title)
        return self._sentences

    def weights(self) -> SentenceWeights:
        if self._weights is None:
            store, row = self._store, self._row
            terms = store.terms[row[10] : row[11]].decode("utf-8", "surrogatepass")
            names = terms.split(" ") if terms else []
            pairs = slice(row[8], row[9])
            self._weights = SentenceWeights(
                dict(zip(names, range(len(names)), strict=True)),
                store.indptr[row[6] : row[7]].tolist(),
                store.sentence_ids[pairs].tolist(),
                store.weights[pairs].tolist(),
            )
        return self._weights

    def compressed(self, query: str, k: int, sentence_chars: int) -> str:
        key = (query, k, sentence_chars)
        text = self._compressed.get(key)
        if text is None:
            sentences = self.sentences()
            ranked = rank_sentences(len(sentences), self.weights, query, k)
            text = render(sentences, ranked, sentence_chars)
            if len(self._compressed) >= _COMPRESSED_PER_DOC:
                self._compressed.clear()
            self._compressed[key] = text
        return text

    def sentence_view(self) -> SentenceView:
        sentences = self.sentences()
        table = self.weights()
        terms: list[list[str]] = [[] for _ in sentences]
        for term, row in table.rows.items():
            for j in range(table.indptr[row], table.indptr[row + 1]):
                terms[table.sentences[j]].append(term)
        return SentenceView(sentences, tuple(map(tuple, terms)))

    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            store, row = self._store, self._row
            shingles = frozenset(store.shingles[row[4] : row[5]].tolist())
            raw = store.signatures[self._position].tobytes()
            self._fingerprint = Fingerprint(row[1], shingles, bands_of(raw))
        return self._fingerprint

    def entities(self) -> tuple[Mention, ...]:
        if self._entities is None:
            row = self._row
            raw = self._store.entities[row[12] : row[13]].decode("utf-8", "surrogatepass")
            # A fan-out search decodes up to 50 documents' entities in one step, so the
            # tuples are built directly, without Mention.__new__'s Python frame.
            kinds, new = _KIND_OF_CODE, tuple.__new__
            self._entities = tuple(
                [new(Mention, (*part[1:].split(_US), kinds[part[0]])) for part in raw.split(_RS)]
                if raw
                else ()
            )
        return self._entities
