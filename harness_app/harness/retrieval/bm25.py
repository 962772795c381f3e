"""A BM25 index persisted on disk and memory-mapped: the harness's default Retriever.

Layout of an index directory (all arrays are .npy, opened with mmap_mode="r"):

    manifest.json          format version, k1, b, counts, avgdl, corpus content hash
    ids.*                  document ids (StringTable: blob, offsets, sorted hashes)
    docs.bin, docs.offsets.npy   titles and texts
    terms.*                the vocabulary (StringTable); a term's position is its row
    postings.indptr.npy    int64, one row per term (CSR, term-major)
    postings.docs.npy      int32 document positions, ascending within a row
    postings.weights.npy   float32 BM25 weight of each (term, doc), idf included
    postings.max.npy       float32 largest weight of each term (for the index's k1 and b)
    postings.top.*         CSR of the documents where each term weighs most (a few per term)
    analysis.*             each document's query-independent analysis (analysis_store.py),
                           unless built with analysis=False; `document_analysis` reads it

A query with many postings is answered by MaxScore pruning (pruning.py): the bounds in
postings.max and postings.top let it skip the long rows of common terms and rank a few
hundred candidates instead of every matching document, with the same results. Otherwise,
and as the reference the pruned path is tested against, a query adds the rows of its terms
into a dense float32 buffer (one per thread, reused and re-zeroed only where it was
touched) and selects the top k with argpartition. When the rows are short compared with
the corpus, only the touched documents are considered, so a query costs time in
proportion to its postings, not to the corpus size.

The unpruned path runs as one compiled loop where Numba is installed (kernel.py chooses,
after BM25_KERNEL): the same arithmetic in the same order, so the same hits and scores, in
one call instead of about 25 NumPy calls, whose overhead is most of a small corpus's query.
A query's terms are found in a per-process cache, else in the vocabulary: read whole into a
dict by the first search when it is small, else looked up by hash (compiled, or NumPy).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from harness_app.harness.analysis import ANALYSIS_VERSION
from harness_app.harness.retrieval.analysis_store import AnalysisStore, StoredAnalysis
from harness_app.harness.retrieval.builder import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    POSTINGS_DOCS,
    POSTINGS_INDPTR,
    POSTINGS_MAX,
    POSTINGS_TOP_DOCS,
    POSTINGS_TOP_INDPTR,
    POSTINGS_WEIGHTS,
    IndexBuilder,
)
from harness_app.harness.retrieval.kernel import Kernel, load_kernel
from harness_app.harness.retrieval.pruning import (
    Postings,
    Row,
    candidates,
    exact_scores,
    sorted_unique,
)
from harness_app.harness.retrieval.store import (
    DocumentStore,
    StringTable,
    load_array,
    lookup_keys,
)
from harness_app.harness.text import ANALYZER_VERSION, analyze
from harness_app.harness.types import Document, SearchHit

IntArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]

# Below this many postings a query is scored exhaustively: pruning would not pay for itself.
_PRUNE_ABOVE = 100_000
# Scores sampled per result asked for, to find a cutoff below which nothing is ranked.
_SAMPLE_PER_K = 32
# Scan the whole score buffer once postings reach 1/16 of the documents: a pass over the
# dense buffer costs about a sixteenth of a gather at each posting.
_DENSE_RATIO = 16
# Fewer candidates than this are sorted outright.
_SORT_BELOW = 64
# Query terms repeat across queries; remembering where their rows are skips the hashing.
_ROW_CACHE_LIMIT = 100_000
# Documents whose decoded analysis is kept, about 18 kB each: the size of the caches the
# computed analysis uses (compress.py, dedup.py, graph.py), which then stay empty.
_ANALYSIS_CACHE = 16384
# A vocabulary of at most this many terms is read into a dict by the first search (41k
# terms: 16 ms and 4.6 MB): each new term is then a dict lookup instead of a hash search,
# which is most of the extra cost of a fresh process's first thousand queries.
_EAGER_VOCABULARY = 1 << 17
# The compiled scorer keeps the best k by insertion: above this k, NumPy's sort ranks.
_KERNEL_MAX_K = 128
_NO_POSITIONS = np.empty(0, dtype=np.int64)
_ABSENT = (0, 0, -1)  # the postings slice and row of a term the index does not hold
_UNRESOLVED = object()


class BM25IndexError(Exception):
    """An index directory can't be used."""


class CorruptIndexError(BM25IndexError):
    """Missing, half-written or inconsistent files."""


class StaleIndexError(BM25IndexError):
    """A sound index, but for other content, another format or another analyzer."""


class BM25Index:
    """Retriever over one corpus. Build with `build`, reopen with `load`."""

    def __init__(
        self, directory: Path, manifest: dict[str, Any], *, kernel: str | None = None
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self._store = DocumentStore(directory)
        self._terms = StringTable(directory, "terms")
        self._indptr = load_array(directory / POSTINGS_INDPTR)
        self._docs = load_array(directory / POSTINGS_DOCS)
        self._weights = load_array(directory / POSTINGS_WEIGHTS)
        self._maxes = load_array(directory / POSTINGS_MAX)
        self._top_indptr = load_array(directory / POSTINGS_TOP_INDPTR)
        self._postings = Postings(
            self._docs,
            self._weights,
            self._maxes,
            self._top_indptr,
            load_array(directory / POSTINGS_TOP_DOCS),
        )
        self._local = threading.local()
        # term -> (postings slice, term row); (0, 0, -1) if absent
        self._rows: dict[str, tuple[int, int, int]] = {}
        self._positions: dict[str, int] = {}  # doc id -> position, for hits just returned
        self._check_shapes()
        self._analysis = AnalysisStore(directory, len(self)) if manifest.get("analysis") else None
        # Decoded analyses of recently shown documents: the samples of a GRPO group, and
        # questions over the same corpus, show the same documents again. Thread-safe.
        self._decoded = lru_cache(maxsize=_ANALYSIS_CACHE)(self._decode_analysis)
        self._kernel_mode = kernel
        self._kernel: Any = _UNRESOLVED  # imported on the first search (kernel.py)
        self._vocabulary: Any = _UNRESOLVED  # term -> row when small, read on first use
        self._vocabulary_lock = threading.Lock()

    # --- construction ---------------------------------------------------------------

    @classmethod
    def build(
        cls,
        documents: Iterable[Document],
        directory: Path | str,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        analysis: bool = True,
    ) -> BM25Index:
        """Index `documents` into `directory` (replacing what is there) and open it.

        `analysis=False` leaves out the stored per-document analysis (a retrieval-only
        index, quicker to build; the harness then computes the analysis itself).

        The files are written to a sibling temporary directory that is renamed into place
        only when complete, so a crash or a concurrent reader never sees half an index.
        """
        target = Path(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
        try:
            builder = IndexBuilder(staging, k1=k1, b=b, analysis=analysis)
            for doc in documents:
                builder.add(doc)
            builder.finish()
            _move_into_place(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return cls.load(target)

    @classmethod
    def load(
        cls, directory: Path | str, *, expected_content_hash: str = "", kernel: str | None = None
    ) -> BM25Index:
        """Open an index; StaleIndexError or CorruptIndexError when it can't be trusted.

        `kernel` (auto, numba or numpy) overrides BM25_KERNEL for this index (kernel.py).
        """
        path = Path(directory)
        manifest = _read_manifest(path)
        if expected_content_hash and manifest["content_hash"] != expected_content_hash:
            raise StaleIndexError(f"{path} indexes other content (corpus hash differs)")
        try:
            return cls(path, manifest, kernel=kernel)
        except (OSError, ValueError) as exc:
            raise CorruptIndexError(f"{path}: {exc}") from exc

    def _check_shapes(self) -> None:
        m = self.manifest
        problems = [
            len(self._store) != m["documents"] and "document count",
            len(self._terms) != m["terms"] and "term count",
            len(self._indptr) != m["terms"] + 1 and "postings.indptr length",
            (len(self._indptr) and int(self._indptr[-1]) != m["postings"]) and "postings total",
            len(self._docs) != m["postings"] and "postings.docs length",
            len(self._weights) != m["postings"] and "postings.weights length",
            len(self._maxes) != m["terms"] and "postings.max length",
            len(self._top_indptr) != m["terms"] + 1 and "postings.top.indptr length",
        ]
        found = [p for p in problems if p]
        if found:
            raise ValueError(f"manifest does not match the files ({', '.join(found)})")

    # --- properties -----------------------------------------------------------------

    @property
    def content_hash(self) -> str:
        return str(self.manifest["content_hash"])

    @property
    def k1(self) -> float:
        return float(self.manifest["k1"])

    @property
    def b(self) -> float:
        return float(self.manifest["b"])

    # --- Retriever protocol -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self._store.ids.lookup(doc_id) >= 0

    def document(self, doc_id: str) -> Document:
        position = self._position(doc_id)
        if position < 0:
            raise KeyError(doc_id)
        return self._store.get(position)

    def document_analysis(self, doc: Document) -> StoredAnalysis | None:
        """The stored analysis of `doc` (one this index served), or None without one.

        Decoded parts are kept for the last `_ANALYSIS_CACHE` documents asked for.
        """
        if self._analysis is None:
            return None
        position = self._position(doc.doc_id)
        return None if position < 0 else self._decoded(position, doc)

    def _decode_analysis(self, position: int, doc: Document) -> StoredAnalysis | None:
        assert self._analysis is not None
        return self._analysis.get(position, doc)

    def forget_decoded_analyses(self) -> None:
        """Empty the cache of decoded analyses (benchmarks of a fresh process)."""
        self._decoded.cache_clear()

    def _position(self, doc_id: str) -> int:
        position = self._positions.get(doc_id)
        return self._store.ids.lookup(doc_id) if position is None else position

    def iter_documents(self) -> Iterator[Document]:
        return iter(self._store)

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        """Top-k documents by BM25; ties go to the earlier document in corpus order."""
        return self._search(query, k, exclude, prune=True, kernel=self.kernel)

    @property
    def kernel(self) -> Kernel | None:
        """The compiled loops this index searches with, or None for NumPy (kernel.py)."""
        return self.choose_kernel()

    def choose_kernel(self) -> Kernel | None:
        """Check BM25_KERNEL (or the index's own choice) and load the compiled loops now,
        rather than on the first search: ValueError for an unknown choice,
        KernelUnavailableError when `numba` was asked for and cannot be had."""
        if self._kernel is _UNRESOLVED:
            self._kernel = load_kernel(self._kernel_mode)
        return self._kernel

    def search_exhaustive(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        """`search` without pruning: every matching document is scored and ranked.

        The same results, more slowly; the reference the pruned search and the compiled
        scorer are checked against (always NumPy).
        """
        return self._search(query, k, exclude, prune=False, kernel=None)

    def _search(
        self, query: str, k: int, exclude: Collection[str], *, prune: bool, kernel: Kernel | None
    ) -> list[SearchHit]:
        if k <= 0 or not len(self):
            return []
        rows = self._query_rows(query)
        if not rows:
            return []
        excluded = self._store.ids.lookup_many(list(exclude)) if exclude else None
        if excluded is not None:
            excluded = excluded[excluded >= 0]
        found_positions = None
        if prune and len(self) > _PRUNE_ABOVE and _postings(rows) > _PRUNE_ABOVE:
            found_positions = candidates(self._postings, rows, k, excluded, self._buffer())
        if found_positions is not None:
            scores = exact_scores(self._postings, rows, found_positions, self._buffer())
            positions = found_positions.astype(np.int64)
        elif kernel is not None and k <= _KERNEL_MAX_K:
            best, best_scores = kernel.top_k(
                self._docs,
                self._weights,
                np.array(rows, dtype=np.int64),
                self._buffer(),
                _NO_POSITIONS if excluded is None else excluded,
                k,
            )
            return self._hits(best, best_scores)
        else:
            positions, scores = self._score(rows, excluded, k)
        top = _top_k(positions, scores, k)
        return self._hits(positions[top], scores[top])

    def _hits(self, best: IntArray, scores: ScoreArray) -> list[SearchHit]:
        found = self._store.ids.get_many(best)
        # The caller usually asks for these documents next; spare it the id lookups.
        if len(self._positions) > _ROW_CACHE_LIMIT:
            self._positions.clear()  # other threads only ever .get() from it
        self._positions.update(zip(found, best.tolist(), strict=True))
        return [
            SearchHit(doc_id, score, rank)
            for rank, (doc_id, score) in enumerate(zip(found, scores.tolist(), strict=True), 1)
        ]

    # --- scoring ----------------------------------------------------------------------

    def _query_rows(self, query: str) -> list[Row]:
        counts = Counter(analyze(query))
        found = {term: self._rows.get(term) for term in counts}
        unknown = [term for term, bounds in found.items() if bounds is None]
        if unknown:
            found.update(self._look_up_rows(unknown))
        rows = []
        for term, count in counts.items():
            start, end, row = found[term] or _ABSENT
            if end > start:
                rows.append((start, end, count, row))
        return rows

    def _look_up_rows(self, terms: list[str]) -> dict[str, tuple[int, int, int]]:
        """Postings slices and rows of `terms` ((0, 0, -1) when absent), remembered."""
        vocabulary = self.small_vocabulary()
        if vocabulary is not None:
            indptr = self._indptr
            found = {}
            for term in terms:
                row = vocabulary.get(term, -1)
                found[term] = (indptr.item(row), indptr.item(row + 1), row) if row >= 0 else _ABSENT
        elif (kernel := self.kernel) is not None:
            wanted, encoded, bounds = lookup_keys(terms)
            table = self._terms.lookup_arrays()
            slices = kernel.term_rows(*table, self._indptr, wanted, encoded, bounds).tolist()
            found = dict(zip(terms, map(tuple, slices), strict=True))
        else:
            found = self._look_up_rows_numpy(terms)
        if len(self._rows) > _ROW_CACHE_LIMIT:
            self._rows.clear()  # other threads only ever .get() from it, so this is safe
        self._rows.update(found)
        return found

    def small_vocabulary(self) -> dict[str, int] | None:
        """Every term with its row, read once, when there are at most _EAGER_VOCABULARY
        terms; None for a larger vocabulary, whose terms are looked up one by one."""
        if self._vocabulary is _UNRESOLVED:
            with self._vocabulary_lock:
                if self._vocabulary is _UNRESOLVED:
                    size = len(self._terms)
                    self._vocabulary = (
                        dict(zip(self._terms, range(size), strict=True))
                        if size <= _EAGER_VOCABULARY
                        else None
                    )
        vocabulary: dict[str, int] | None = self._vocabulary
        return vocabulary

    def _look_up_rows_numpy(self, terms: list[str]) -> dict[str, tuple[int, int, int]]:
        rows = self._terms.lookup_many(terms)
        if not len(self._terms):
            return dict.fromkeys(terms, _ABSENT)
        known = np.maximum(rows, 0)
        starts, ends = self._indptr[known], self._indptr[known + 1]
        return {
            term: (start, end, row) if row >= 0 else _ABSENT
            for term, row, start, end in zip(
                terms, rows.tolist(), starts.tolist(), ends.tolist(), strict=True
            )
        }

    def _buffer(self) -> ScoreArray:
        """Per-thread scratch of one score per document, kept all-zero between queries."""
        local = self._local
        if getattr(local, "scores", None) is None:
            local.scores = np.zeros(len(self), dtype=np.float32)
        scores: ScoreArray = local.scores
        return scores

    def _score(
        self, rows: list[Row], excluded: IntArray | None, k: int
    ) -> tuple[IntArray, ScoreArray]:
        """Positions (ascending) and scores of the matching documents that may be in the top k.

        All rows go through one `np.add.at` in query order, so each document's weights are
        added in the same order as row by row. Documents of one row are distinct, so the
        k-th best score among a sample of the longest row is reached by at least k
        documents: those below it are dropped before anything is sorted. Excluded
        documents score -inf and are dropped with them.
        """
        acc = self._buffer()
        docs, weights = self._docs, self._weights
        parts = [docs[start:end] for start, end, _, _ in rows]
        touched = parts[0] if len(parts) == 1 else np.concatenate(parts)
        added = [
            weights[start:end] if count == 1 else weights[start:end] * count
            for start, end, count, _ in rows
        ]
        try:
            np.add.at(acc, touched, added[0] if len(added) == 1 else np.concatenate(added))
            if excluded is not None:
                acc[excluded] = -np.inf
            if len(touched) * _DENSE_RATIO >= len(acc):
                # Many postings for the corpus: one pass over the dense buffer costs less
                # than gathering at every posting. Sampled documents are distinct.
                sample = acc[:: max(1, len(acc) // (_SAMPLE_PER_K * k))]
                cutoff = _kth_or_zero(sample, k)
                dense = np.flatnonzero(acc >= cutoff if cutoff > 0 else acc > 0)
                return dense, acc[dense]
            longest = max(parts, key=len)  # distinct documents: a valid sample
            cutoff = _kth_or_zero(acc[longest[:: max(1, len(longest) // (_SAMPLE_PER_K * k))]], k)
            scores = acc[touched]
            positions = touched[scores >= cutoff if cutoff > 0 else scores > 0]
            if len(parts) > 1:
                positions = sorted_unique(positions)
            return positions.astype(np.int64), acc[positions]
        finally:
            if len(touched) * _DENSE_RATIO >= len(acc):
                acc.fill(0)
            else:
                acc[touched] = 0
                if excluded is not None:
                    acc[excluded] = 0


def _postings(rows: list[Row]) -> int:
    return sum(end - start for start, end, _, _ in rows)


def _kth_or_zero(scores: ScoreArray, k: int) -> float:
    """The k-th best of `scores`, or 0 when there are fewer than k."""
    if len(scores) < k:
        return 0.0
    return float(np.partition(scores, len(scores) - k)[len(scores) - k])


def _top_k(positions: IntArray, scores: ScoreArray, k: int) -> IntArray:
    """Indices of the k best (score desc, position asc), deterministic under ties."""
    if len(scores) > max(k, _SORT_BELOW):
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= threshold)
    else:
        candidates = np.arange(len(scores))
    order = np.lexsort((positions[candidates], -scores[candidates]))
    top: IntArray = candidates[order[:k]]
    return top


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise CorruptIndexError(f"{path} has no {MANIFEST} (missing or unfinished build)") from None
    except (OSError, ValueError) as exc:
        raise CorruptIndexError(f"{path}/{MANIFEST} is unreadable: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptIndexError(f"{path}/{MANIFEST} is not a {FORMAT} manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise StaleIndexError(
            f"{path} has format version {manifest.get('version')}, this code reads {FORMAT_VERSION}"
        )
    if manifest.get("analysis") not in (None, ANALYSIS_VERSION):
        raise StaleIndexError(
            f"{path} stores document analysis {manifest.get('analysis')!r}, "
            f"this code computes {ANALYSIS_VERSION!r}"
        )
    if manifest.get("analyzer") != ANALYZER_VERSION:
        raise StaleIndexError(
            f"{path} was analysed with {manifest.get('analyzer')!r}, not {ANALYZER_VERSION!r}"
        )
    return manifest


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename the finished build over `target`; an old index is moved aside, then deleted.

    Processes that still have the old files mapped keep reading them: unlinking does not
    invalidate a mapping on POSIX.
    """
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
    os.rename(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
