"""Document embeddings beside the BM25 index, and exact dense search over them.

The embeddings live in the BM25 index's folder, in a sub-folder `dense/`:

- `embeddings.npy`: one float16 row per document, in the index's document order, unit
  length (float16 halves the memory of float32; cosine scores move by about 1e-3, which
  reorders only near-ties);
- `ids.*`: the document ids as a StringTable (store.py), so exclusions are looked up
  without reaching into the BM25 index;
- `manifest.json`: the encoder's name, dimension and normalisation, the document count
  and the corpus content hash.

The folder is written under a temporary name and renamed into place when complete, so a
reader never sees half of it; an index built with another encoder, or for other content,
is refused with an error that says which. Search is exact: the query vector times the
matrix, then a partial sort. numpy has no float16 BLAS and widens float16 slowly (about
0.3 s per query at 100k rows), so the first search widens the whole matrix to float32 in
memory once when it fits `WIDEN_BELOW_BYTES` (146 MB at 100k x 384), and a product is
then one BLAS call (about 25 ms at 100k, bench/bench_dense.py); a bigger matrix is
widened a block at a time per query. Far above 100k, an HNSW graph (ann.py) answers
instead when DENSE_ANN asks for one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.format import open_memmap

from harness_app.harness.retrieval.encoder import Encoder, FloatMatrix
from harness_app.harness.retrieval.store import StringTable, StringTableWriter, load_array
from harness_app.harness.types import Document

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, the atomic rename still holds
    fcntl = None  # type: ignore[assignment]

FORMAT = "harness-dense"
FORMAT_VERSION = 1
FOLDER = "dense"
MANIFEST = "manifest.json"
EMBEDDINGS = "embeddings.npy"
_ENCODE_CHUNK = 4096  # documents whose texts are held in memory at once while building
_SEARCH_BLOCK = 8192  # rows widened to float32 at a time while searching a big matrix
WIDEN_BELOW_BYTES = 1 << 30  # float32 copies up to this size are kept in memory

# Called with (documents embedded so far, documents in all).
BuildProgress = Callable[[int, int], None]


class DenseIndexError(Exception):
    """The embeddings are missing, unfinished or unreadable."""


class DenseIndexMismatchError(DenseIndexError):
    """The embeddings were made by another encoder, or for other documents."""


def dense_folder(index_directory: Path | str) -> Path:
    return Path(index_directory) / FOLDER


def embedded_text(doc: Document) -> str:
    """What is encoded: the title and the text, as BM25 indexes them."""
    return f"{doc.title} {doc.text}" if doc.title else doc.text


class DenseIndex:
    """The embeddings of one corpus; `build` writes them, `load` opens them."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder = folder
        self.manifest = manifest
        self.matrix = load_array(folder / EMBEDDINGS)
        self.ids = StringTable(folder, "ids")
        self.ann: Any = None  # an ann.HnswIndex when DENSE_ANN chose the graph
        self._widened: npt.NDArray[np.float32] | None = None
        self._widen_lock = threading.Lock()
        if self.matrix.shape != (manifest["documents"], manifest["dimension"]):
            raise DenseIndexError(
                f"{folder}: {EMBEDDINGS} has shape {self.matrix.shape}, the manifest says "
                f"({manifest['documents']}, {manifest['dimension']})"
            )
        if len(self.ids) != manifest["documents"]:
            raise DenseIndexError(f"{folder}: {len(self.ids)} ids for {manifest['documents']} rows")

    @property
    def encoder_name(self) -> str:
        return str(self.manifest["encoder"])

    def __len__(self) -> int:
        return int(self.manifest["documents"])

    @classmethod
    def build(
        cls,
        index_directory: Path | str,
        documents: Iterable[Document],
        encoder: Encoder,
        *,
        count: int,
        content_hash: str,
        progress: BuildProgress | None = None,
    ) -> DenseIndex:
        """Embed `count` documents into `index_directory`/dense, replacing what is there.

        Concurrent builders are serialised by a file lock; one that waited finds the
        embeddings made and opens them instead of embedding the corpus again.
        """
        with build_lock(dense_folder(index_directory).with_name(".dense.lock")):
            try:
                return cls.load(
                    index_directory, encoder_name=encoder.name, content_hash=content_hash
                )
            except DenseIndexError:
                pass
            _build(index_directory, documents, encoder, count, content_hash, progress)
        return cls.load(index_directory, encoder_name=encoder.name, content_hash=content_hash)

    @classmethod
    def load(
        cls, index_directory: Path | str, *, encoder_name: str, content_hash: str = ""
    ) -> DenseIndex:
        """Open the embeddings; DenseIndexMismatchError when `encoder_name` did not make
        them or they belong to other content, DenseIndexError when they are absent."""
        folder = dense_folder(index_directory)
        manifest = _read_manifest(folder)
        if manifest.get("encoder") != encoder_name:
            raise DenseIndexMismatchError(
                f"{folder} holds embeddings by encoder {manifest.get('encoder')!r} "
                f"({manifest.get('dimension')} dimensions); this retriever encodes queries "
                f"with {encoder_name!r}: rebuild the embeddings or use that encoder"
            )
        if content_hash and manifest.get("content_hash") != content_hash:
            raise DenseIndexMismatchError(f"{folder} embeds other content (corpus hash differs)")
        try:
            return cls(folder, manifest)
        except (OSError, ValueError) as exc:
            raise DenseIndexError(f"{folder}: {exc}") from exc

    def search(
        self, vector: FloatMatrix, k: int, exclude: Collection[str] = frozenset()
    ) -> list[tuple[str, float]]:
        """The k rows nearest to unit `vector` by cosine, as (doc id, score), best first;
        ties go to the earlier document. Exact, unless an HNSW graph is attached."""
        if k <= 0 or not len(self):
            return []
        excluded = None
        if exclude:
            excluded = self.ids.lookup_many(list(exclude))
            excluded = excluded[excluded >= 0]
        if self.ann is not None:
            positions, found = self.ann.search(self._query(vector), k, excluded)
            pairs = zip(positions.tolist(), found.tolist(), strict=True)
            return [(self.ids[position], score) for position, score in pairs]
        scores = self.scores(vector)
        if excluded is not None:
            scores[excluded] = -np.inf
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]
        return [(self.ids[p], float(scores[p])) for p in top.tolist() if scores[p] > -np.inf]

    def scores(self, vector: FloatMatrix) -> npt.NDArray[np.float32]:
        """Cosine of unit `vector` with every row."""
        query = self._query(vector)
        widened = self._widened_matrix()
        if widened is not None:
            return np.matmul(widened, query)
        out = np.empty(len(self), dtype=np.float32)
        block = np.empty((min(_SEARCH_BLOCK, len(self)), self.matrix.shape[1]), np.float32)
        for start in range(0, len(self), _SEARCH_BLOCK):
            rows = self.matrix[start : start + _SEARCH_BLOCK]
            widened_rows = block[: len(rows)]
            widened_rows[...] = rows
            np.matmul(widened_rows, query, out=out[start : start + len(rows)])
        return out

    def _query(self, vector: FloatMatrix) -> npt.NDArray[np.float32]:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != self.matrix.shape[1]:
            raise ValueError(
                f"query has {query.shape[0]} dimensions, the index {self.matrix.shape[1]}"
            )
        return query

    def _widened_matrix(self) -> npt.NDArray[np.float32] | None:
        """The matrix as float32 in memory, made on first use, if it fits the limit."""
        if self._widened is None and self.matrix.size * 4 <= WIDEN_BELOW_BYTES:
            with self._widen_lock:
                if self._widened is None:
                    self._widened = np.asarray(self.matrix, dtype=np.float32)
        return self._widened


def _build(
    index_directory: Path | str,
    documents: Iterable[Document],
    encoder: Encoder,
    count: int,
    content_hash: str,
    progress: BuildProgress | None,
) -> None:
    target = dense_folder(index_directory)
    staging = Path(tempfile.mkdtemp(prefix=".dense.building-", dir=target.parent))
    started = time.perf_counter()
    try:
        _write(staging, documents, encoder, count=count, progress=progress)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "encoder": encoder.name,
            "dimension": encoder.dimension,
            "normalized": "l2",
            "dtype": "float16",
            "documents": count,
            "content_hash": content_hash,
            "build_seconds": round(time.perf_counter() - started, 3),
        }
        # The manifest goes last: a folder without one is an unfinished build.
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _move_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write(
    folder: Path,
    documents: Iterable[Document],
    encoder: Encoder,
    *,
    count: int,
    progress: BuildProgress | None,
) -> None:
    matrix = open_memmap(folder / EMBEDDINGS, "w+", np.float16, (count, encoder.dimension))
    ids = StringTableWriter(folder, "ids")
    written = 0
    for chunk in _chunks(iter(documents), _ENCODE_CHUNK):
        if written + len(chunk) > count:
            raise DenseIndexError(f"the corpus has more than the {count} documents expected")
        ids.extend(doc.doc_id for doc in chunk)
        report = _offset_progress(progress, written, count)
        vectors = encoder.encode([embedded_text(doc) for doc in chunk], progress=report)
        matrix[written : written + len(chunk)] = vectors.astype(np.float16)
        written += len(chunk)
    if written != count:
        raise DenseIndexError(f"the corpus has {written} documents, {count} were expected")
    ids.close()
    matrix.flush()
    del matrix


def _offset_progress(
    progress: BuildProgress | None, offset: int, count: int
) -> Callable[[int, int], None] | None:
    """The encoder's progress within one chunk, as progress over the whole corpus."""
    if progress is None:
        return None
    return lambda encoded, _: progress(offset + encoded, count)


def _chunks(documents: Iterator[Document], size: int) -> Iterator[list[Document]]:
    while True:
        chunk = [doc for _, doc in zip(range(size), documents, strict=False)]
        if not chunk:
            return
        yield chunk


def _read_manifest(folder: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise DenseIndexError(f"{folder} has no embeddings (never built, or unfinished)") from None
    except (OSError, ValueError) as exc:
        raise DenseIndexError(f"{folder}/{MANIFEST} is unreadable: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DenseIndexError(f"{folder}/{MANIFEST} is not a {FORMAT} manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise DenseIndexMismatchError(
            f"{folder} has format version {manifest.get('version')}, "
            f"this code reads {FORMAT_VERSION}"
        )
    return manifest


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename the finished folder over `target`; an old one is moved aside, then deleted
    (processes that still map its files keep reading them)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
    os.rename(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
