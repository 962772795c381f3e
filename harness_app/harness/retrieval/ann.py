"""Approximate nearest neighbours over the dense embeddings: an HNSW graph from faiss.

Exact search (dense.py) reads every row per query: about 25 ms at 100k documents, linear
in the corpus. Far above that a graph pays: HNSW visits a few thousand rows per query
whatever the size, at the price of missing a true neighbour now and then (recall@10
against exact search is in docs/retrieval.md). `DENSE_ANN` chooses:

- `exact` (the default): always exact;
- `hnsw`: the graph for every corpus;
- `auto`: the graph for corpora above `AUTO_ABOVE` documents, exact below.

The graph lives in the embeddings' folder as `hnsw.faiss` with `hnsw.json`, which names
the embeddings it was built from (their count and corpus hash) and its parameters. It is
opened memory-mapped, not read: processes share its vectors and links. It is
built on first use from the float16 matrix, a block at a time, on one thread so that the
same embeddings always give the same graph (and so the same search results), written
under a temporary name and renamed into place, manifest last. A graph for other
embeddings, or without its manifest, is rebuilt, never searched.

Excluded documents are skipped inside the graph search (a faiss ID selector), so a
search that excludes earlier hits still returns k documents, as exact search does.
faiss-cpu is in the `dense` extra; asking for `hnsw` without it says what to install.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from harness_app.harness.retrieval.dense import DenseIndex, DenseIndexError, build_lock
from harness_app.harness.types import JSONObject

FORMAT = "harness-hnsw"
FORMAT_VERSION = 1
GRAPH = "hnsw.faiss"
MANIFEST = "hnsw.json"
EXACT, HNSW, AUTO = "exact", "hnsw", "auto"
ANN_MODES: tuple[str, ...] = (EXACT, HNSW, AUTO)
AUTO_ABOVE = 200_000  # documents above which `auto` searches the graph
NEIGHBOURS = 32  # HNSW's M: links per node on the upper layers, twice that on layer 0
EF_CONSTRUCTION = 128  # candidate list while inserting
EF_SEARCH = 128  # candidate list while searching (recall against speed)
_ADD_BLOCK = 16384  # rows widened to float32 and inserted at a time

BuildProgress = Callable[[int, int], None]


class AnnUnavailableError(DenseIndexError):
    """The HNSW graph was asked for but faiss is not installed."""


def ann_mode(value: str | None = None) -> str:
    """`value`, else the DENSE_ANN environment variable, else exact; checked."""
    mode = (value if value is not None else os.environ.get("DENSE_ANN", "")).strip() or EXACT
    if mode not in ANN_MODES:
        raise ValueError(f"DENSE_ANN={mode!r}: use {', '.join(ANN_MODES)}")
    return mode


def wants_graph(mode: str, documents: int) -> bool:
    return mode == HNSW or (mode == AUTO and documents > AUTO_ABOVE)


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise AnnUnavailableError(
            f"DENSE_ANN=hnsw needs faiss-cpu, which is not installed ({exc}); "
            "install the dense extra (pip install -e '.[dense]') or set DENSE_ANN=exact"
        ) from None
    return faiss


class HnswIndex:
    """An HNSW graph over one DenseIndex's rows; positions are the embeddings' rows."""

    def __init__(self, graph: Any, manifest: JSONObject, ef_search: int = EF_SEARCH) -> None:
        self.graph = graph
        self.manifest = manifest
        self.ef_search = ef_search

    @classmethod
    def ensure(
        cls,
        dense: DenseIndex,
        *,
        neighbours: int = NEIGHBOURS,
        ef_construction: int = EF_CONSTRUCTION,
        progress: BuildProgress | None = None,
    ) -> HnswIndex:
        """The graph of `dense`, built first when it is missing or for other embeddings.

        Concurrent builders wait on the embeddings' lock; one that waited opens the graph
        the other made.
        """
        found = cls._load_if_sound(dense)
        if found is not None:
            return found
        with build_lock(dense.folder.with_name(".hnsw.lock")):
            found = cls._load_if_sound(dense)
            if found is not None:
                return found
            _build(dense, neighbours, ef_construction, progress)
        return cls.load(dense)

    @classmethod
    def _load_if_sound(cls, dense: DenseIndex) -> HnswIndex | None:
        """The graph, or None when it must be (re)built; a missing faiss still raises."""
        try:
            return cls.load(dense)
        except AnnUnavailableError:
            raise
        except DenseIndexError:
            return None

    @classmethod
    def load(cls, dense: DenseIndex) -> HnswIndex:
        """Open the graph; DenseIndexError when it is absent, unfinished or not for `dense`."""
        faiss = _faiss()
        manifest = _read_manifest(dense.folder)
        expected = _identity(dense)
        found = {key: manifest.get(key) for key in expected}
        if found != expected:
            raise DenseIndexError(
                f"{dense.folder / GRAPH} was built for other embeddings "
                f"({found}, these are {expected})"
            )
        try:
            # The vectors and the links stay in the file, mapped: every process that
            # opens the graph shares one copy of them in the page cache.
            graph = faiss.read_index(str(dense.folder / GRAPH), faiss.IO_FLAG_MMAP_IFC)
        except RuntimeError as exc:  # faiss reports I/O and format errors this way
            raise DenseIndexError(f"{dense.folder / GRAPH} is unreadable: {exc}") from exc
        if graph.ntotal != len(dense) or graph.d != dense.matrix.shape[1]:
            raise DenseIndexError(
                f"{dense.folder / GRAPH} holds {graph.ntotal} x {graph.d}, "
                f"the embeddings are {len(dense)} x {dense.matrix.shape[1]}"
            )
        return cls(graph, manifest)

    def __len__(self) -> int:
        return int(self.graph.ntotal)

    def search(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        excluded: npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Positions and inner products of about the k nearest rows, best first, ties to
        the earlier row; `excluded` positions are never returned."""
        faiss = _faiss()
        selector = None
        if excluded is not None and len(excluded):
            ids = np.ascontiguousarray(excluded, dtype=np.int64)
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(len(ids), faiss.swig_ptr(ids)))
        params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k), sel=selector)
        scores, positions = self.graph.search(
            np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1), k, params=params
        )
        found = positions[0] >= 0  # fewer than k reachable: faiss pads with -1
        positions, scores = positions[0][found].astype(np.int64), scores[0][found]
        order = np.lexsort((positions, -scores))
        return positions[order], scores[order]


def _identity(dense: DenseIndex) -> JSONObject:
    """What ties a graph to its embeddings."""
    return {
        "documents": len(dense),
        "dimension": int(dense.matrix.shape[1]),
        "encoder": dense.encoder_name,
        "content_hash": dense.manifest.get("content_hash", ""),
    }


def _build(
    dense: DenseIndex, neighbours: int, ef_construction: int, progress: BuildProgress | None
) -> None:
    faiss = _faiss()
    started = time.perf_counter()
    graph = faiss.IndexHNSWFlat(dense.matrix.shape[1], neighbours, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = ef_construction
    with _one_thread(faiss):
        for start in range(0, len(dense), _ADD_BLOCK):
            graph.add(np.asarray(dense.matrix[start : start + _ADD_BLOCK], dtype=np.float32))
            if progress is not None:
                progress(min(start + _ADD_BLOCK, len(dense)), len(dense))
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        **_identity(dense),
        "neighbours": neighbours,
        "ef_construction": ef_construction,
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    # Graph first, manifest last, each renamed into place: a reader that finds the
    # manifest finds the whole graph it describes.
    (dense.folder / MANIFEST).unlink(missing_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".hnsw-", dir=dense.folder)
    os.close(handle)
    try:
        faiss.write_index(graph, temporary)
        os.replace(temporary, dense.folder / GRAPH)
        _write_atomically(dense.folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


@contextlib.contextmanager
def _one_thread(faiss: Any) -> Iterator[None]:
    """Insert on one OpenMP thread: a parallel build inserts in a racy order, and the
    graph (so the results) would differ from build to build."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def _read_manifest(folder: Path) -> JSONObject:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise DenseIndexError(f"{folder} has no HNSW graph (never built, or unfinished)") from None
    except (OSError, ValueError) as exc:
        raise DenseIndexError(f"{folder / MANIFEST} is unreadable: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DenseIndexError(f"{folder / MANIFEST} is not a {FORMAT} manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise DenseIndexError(f"{folder / MANIFEST} has format version {manifest.get('version')}")
    return manifest
