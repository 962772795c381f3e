"""The retrieval index of each corpus: built once per content hash, opened lazily per process.

The files live under DATA_DIR/indexes/<key>/, where the key (harness.retrieval.index_key)
is the corpus content hash plus the index format and BM25 parameters, so two corpora with
the same documents share one index and a format change gets a fresh one. The Corpus row
carries the status the pages show: missing → queued → building → ready, or stale / failed.

An index that is missing, unfinished, corrupt or built for other content is never used: it
is rebuilt, synchronously, by whichever process needs it, and the row says so meanwhile.

After BM25 the index task embeds the documents for the dense and hybrid retrievers
(settings.DENSE_EMBEDDINGS: when the dense extra is installed, always, or never); the row
reads "embedding" with `index_progress` in percent meanwhile, and "ready" once both are
done; so it does while an HNSW graph is built for a dense search (settings.DENSE_ANN).
BM25 is usable throughout: a failed embedding leaves the row ready, with the reason in
`index_error`, and no embeddings on disk.
These functions write only the status columns of Corpus, which is why they live here rather
than in services.py: the index lifecycle is one concern with its files.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from harness_app.harness.retrieval import (
    BM25Index,
    BM25IndexError,
    StaleIndexError,
    index_key,
    open_index,
)
from harness_app.harness.retrieval.cache import forget_open_indexes
from harness_app.harness.retrieval.dense import DenseIndex, DenseIndexError
from harness_app.harness.retrieval.encoder import (
    Encoder,
    EncoderUnavailableError,
    default_encoder,
    encoder_available,
)
from harness_app.harness.retrieval.hybrid import BM25, retriever_open
from harness_app.harness.types import Document, Retriever
from harness_app.models import Corpus, IndexStatus
from harness_app.models import Document as DocumentRow

logger = logging.getLogger(__name__)

STREAM_CHUNK = 2_000  # documents fetched per round trip while building
PROGRESS_EVERY_S = 2.0  # at most one progress write per this many seconds while embedding

_retrievers: dict[tuple[int, str], BM25Index] = {}
_searchers: dict[tuple[int, str, str], Retriever] = {}
_lock = threading.RLock()  # re-entered when corpus_retriever has to rebuild


def index_root() -> Path:
    return Path(settings.DATA_DIR) / "indexes"


def index_directory(corpus: Corpus) -> Path:
    return index_root() / index_key(corpus.content_hash)


def corpus_documents(corpus_id: int) -> Iterator[Document]:
    """The corpus in import order, streamed from the database (a server-side cursor)."""
    rows = (
        DocumentRow.objects.filter(corpus_id=corpus_id)
        .order_by("pk")
        .values_list("external_id", "title", "text")
        .iterator(chunk_size=STREAM_CHUNK)
    )
    for external_id, title, text in rows:
        yield Document(external_id, title, text)


def corpus_retriever(corpus: Corpus) -> BM25Index:
    """The corpus's BM25 index, opened once per process; built first if it must be."""
    key = (corpus.pk, corpus.content_hash)
    with _lock:
        index = _retrievers.get(key)
        if index is None:
            index, _ = corpus_index_ensure(corpus)
            _retrievers[key] = index
        return index


def corpus_searcher(corpus: Corpus, kind: str = BM25) -> Retriever:
    """The corpus's `kind` retriever (bm25, dense or hybrid), opened once per process.

    Missing embeddings are made first, as a missing BM25 index is; EncoderUnavailableError
    when the dense extra is not installed here.
    """
    if kind == BM25:
        return corpus_retriever(corpus)
    key = (corpus.pk, corpus.content_hash, kind)
    with _lock:
        searcher = _searchers.get(key)
        if searcher is None:
            bm25 = corpus_retriever(corpus)
            graph_progress = _ProgressWriter(corpus, IndexStatus.EMBEDDING)
            searcher = retriever_open(
                kind,
                bm25,
                encoder=default_encoder(),
                build=lambda index, encoder: _embed(corpus, index, encoder),
                ann=settings.DENSE_ANN,
                graph_progress=graph_progress,
            )
            if graph_progress.started:  # an HNSW graph was built (DENSE_ANN)
                _status_set(corpus, IndexStatus.READY, path=str(bm25.directory))
            _searchers[key] = searcher
        return searcher


def corpus_retrievers_forget() -> None:
    """Drop this process's open indexes (tests, or after deleting index files)."""
    with _lock:
        _retrievers.clear()
        _searchers.clear()


def corpus_index_ensure(corpus: Corpus) -> tuple[BM25Index, bool]:
    """Open the corpus's index if it is sound and current, otherwise rebuild it.

    Returns the index and whether it was built by this call.
    """
    try:
        index = BM25Index.load(index_directory(corpus), expected_content_hash=corpus.content_hash)
    except StaleIndexError as exc:
        _status_set(corpus, IndexStatus.STALE, error=str(exc))
    except BM25IndexError as exc:
        _status_set(corpus, IndexStatus.MISSING, error=str(exc))
    else:
        _status_set(corpus, IndexStatus.READY, path=str(index.directory))
        return index, False
    return _build(corpus), True


def corpus_index_build(*, corpus_id: int) -> None:
    """The index task's work: ensure the corpus's index, if the corpus still exists."""
    corpus = Corpus.objects.filter(pk=corpus_id).first()
    if corpus is None:
        logger.info("corpus %s is gone; nothing to index", corpus_id)
        return
    index, _ = corpus_index_ensure(corpus)
    if dense_wanted():
        corpus_embeddings_ensure(corpus, index)


def dense_wanted() -> bool:
    """Whether index builds embed the corpus too (settings.DENSE_EMBEDDINGS)."""
    mode = settings.DENSE_EMBEDDINGS
    return mode == "always" or (mode == "auto" and encoder_available())


def corpus_embeddings_ensure(corpus: Corpus, index: BM25Index) -> DenseIndex:
    """Open the corpus's embeddings if they are sound, otherwise compute them.

    EncoderUnavailableError (noted on the row) when the dense extra is missing.
    """
    try:
        encoder = default_encoder()
    except EncoderUnavailableError as exc:
        _status_set(corpus, IndexStatus.READY, error=f"no dense embeddings: {exc}")
        raise
    try:
        return DenseIndex.load(
            index.directory, encoder_name=encoder.name, content_hash=index.content_hash
        )
    except DenseIndexError:
        return _embed(corpus, index, encoder)


def _embed(corpus: Corpus, index: BM25Index, encoder: Encoder) -> DenseIndex:
    """Embed the corpus beside its BM25 index, with progress on the row."""
    _status_set(corpus, IndexStatus.EMBEDDING)
    Corpus.objects.filter(pk=corpus.pk).update(index_progress=0)
    progress = _ProgressWriter(corpus, IndexStatus.EMBEDDING)
    progress.started = True
    try:
        dense = DenseIndex.build(
            index.directory,
            index.iter_documents(),
            encoder,
            count=len(index),
            content_hash=index.content_hash,
            progress=progress,
        )
    except Exception as exc:
        _status_set(
            corpus, IndexStatus.READY, error=f"embedding failed: {type(exc).__name__}: {exc}"
        )
        raise
    logger.info("embedded the %s documents of corpus %s", len(dense), corpus.name)
    _status_set(corpus, IndexStatus.READY, path=str(index.directory))
    return dense


class _ProgressWriter:
    """A progress callback (done, total) that keeps `index_progress` in percent on the
    row, at most once per PROGRESS_EVERY_S; the first call marks the row `status`."""

    def __init__(self, corpus: Corpus, status: str) -> None:
        self.corpus, self.status = corpus, status
        self.started = False
        self.last = (0.0, -1)  # time and percent of the last write

    def __call__(self, done: int, total: int) -> None:
        if not self.started:
            self.started = True
            _status_set(self.corpus, self.status)
        percent = 100 * done // max(total, 1)
        now = time.monotonic()
        if percent != self.last[1] and (now - self.last[0] >= PROGRESS_EVERY_S or percent == 100):
            Corpus.objects.filter(pk=self.corpus.pk).update(index_progress=percent)
            self.corpus.index_progress = percent
            self.last = (now, percent)


def _build(corpus: Corpus) -> BM25Index:
    _status_set(corpus, IndexStatus.BUILDING)
    _forget(corpus)
    corpus_id = corpus.pk
    try:
        # open_index serialises concurrent builders with a file lock and checks that the
        # indexed content hashes to corpus.content_hash.
        index = open_index(
            lambda: corpus_documents(corpus_id), index_root(), content_hash=corpus.content_hash
        )
    except Exception as exc:
        _status_set(corpus, IndexStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    logger.info("built the index of corpus %s in %s", corpus.name, index.directory)
    _status_set(corpus, IndexStatus.READY, path=str(index.directory))
    return index


def _forget(corpus: Corpus) -> None:
    """Make sure no cache in this process hands out the index that is being replaced.

    open_index keeps what it opened per directory and would return the old object for the
    same directory; the retrieval cache has no per-directory forget, so it is cleared
    whole (the other indexes stay open through _retrievers and reopen cheaply).
    """
    with _lock:
        for key in [key for key in _retrievers if key[0] == corpus.pk]:
            del _retrievers[key]
        for searcher_key in [key for key in _searchers if key[0] == corpus.pk]:
            del _searchers[searcher_key]
    forget_open_indexes()


def _status_set(corpus: Corpus, status: str, *, error: str = "", path: str = "") -> None:
    if (corpus.index_status, corpus.index_error) == (status, error) and (
        not path or corpus.index_path == path
    ):
        return  # nothing to say: spare the write on every process start
    fields = {"index_status": status, "index_error": error}
    if path:
        fields["index_path"] = path
    Corpus.objects.filter(pk=corpus.pk).update(**fields)
    for name, value in fields.items():
        setattr(corpus, name, value)
