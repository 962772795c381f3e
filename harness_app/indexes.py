"""The retrieval index of each corpus: built once per content hash, opened lazily per process.

The files live under DATA_DIR/indexes/<key>/, where the key (harness.retrieval.index_key)
is the corpus content hash plus the index format and BM25 parameters, so two corpora with
the same documents share one index and a format change gets a fresh one. The Corpus row
carries the status the pages show: missing → queued → building → ready, or stale / failed.

An index that is missing, unfinished, corrupt or built for other content is never used: it
is rebuilt, synchronously, by whichever process needs it, and the row says so meanwhile.
These functions write only the status columns of Corpus, which is why they live here rather
than in services.py: the index lifecycle is one concern with its files.
"""

from __future__ import annotations

import logging
import threading
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
from harness_app.harness.types import Document
from harness_app.models import Corpus, IndexStatus
from harness_app.models import Document as DocumentRow

logger = logging.getLogger(__name__)

STREAM_CHUNK = 2_000  # documents fetched per round trip while building

_retrievers: dict[tuple[int, str], BM25Index] = {}
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


def corpus_retrievers_forget() -> None:
    """Drop this process's open indexes (tests, or after deleting index files)."""
    with _lock:
        _retrievers.clear()


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
    corpus_index_ensure(corpus)


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
