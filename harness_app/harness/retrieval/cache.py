"""Build each corpus's index once, keyed by content, and share it within a process.

`open_index` is what a worker calls before an episode: the first call in a process opens
(or, if needed, builds) the index, later calls get the same object back. The directory name
is derived from the corpus content hash and the index parameters, so an edited corpus gets
a new index instead of silently reusing the old one, and a missing, unfinished, corrupt or
stale directory is rebuilt rather than trusted.

Concurrent builders of the same index (several Celery workers starting together) are
serialised with an advisory file lock; the loser of the race finds the index built.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from harness_app.harness.analysis import ANALYSIS_VERSION
from harness_app.harness.beir import iter_corpus
from harness_app.harness.retrieval.bm25 import BM25Index, BM25IndexError
from harness_app.harness.retrieval.builder import FORMAT_VERSION
from harness_app.harness.retrieval.store import corpus_content_hash
from harness_app.harness.text import ANALYZER_VERSION
from harness_app.harness.types import Document

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, the atomic rename still holds
    fcntl = None  # type: ignore[assignment]

CorpusFactory = Callable[[], Iterable[Document]]
CorpusSource = Path | str | CorpusFactory

_open: dict[Path, BM25Index] = {}
_file_hashes: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def index_key(content_hash: str, *, k1: float = 0.9, b: float = 0.4) -> str:
    """Directory name for an index of this content built with these parameters."""
    params = f"v{FORMAT_VERSION}|{ANALYZER_VERSION}|{ANALYSIS_VERSION}|k1={k1!r}|b={b!r}"
    return f"bm25-{content_hash[:32]}-{hashlib.sha256(params.encode()).hexdigest()[:8]}"


def corpus_factory(source: CorpusSource) -> CorpusFactory:
    """A callable that streams the corpus: `source` itself, or a BEIR folder/corpus.jsonl."""
    if callable(source):
        return source
    path = Path(source)
    corpus = path / "corpus.jsonl" if path.is_dir() else path
    if not corpus.is_file():
        raise FileNotFoundError(f"no corpus at {corpus}")

    def read() -> Iterator[Document]:
        return iter_corpus(corpus)

    return read


def _content_hash(source: CorpusSource, factory: CorpusFactory) -> str:
    """Hash by streaming; a file's hash is remembered per (path, size, mtime) in-process."""
    if callable(source):
        return corpus_content_hash(factory())
    path = Path(source)
    corpus = path / "corpus.jsonl" if path.is_dir() else path
    stat = corpus.stat()
    key = (str(corpus.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _file_hashes:
        _file_hashes[key] = corpus_content_hash(factory())
    return _file_hashes[key]


def open_index(
    source: CorpusSource,
    cache_dir: Path | str,
    *,
    content_hash: str = "",
    k1: float = 0.9,
    b: float = 0.4,
) -> BM25Index:
    """The BM25 index of a corpus, built under `cache_dir` on first use.

    `source` is a BEIR folder, a corpus.jsonl path, or a zero-argument callable returning
    an iterable of Documents (called once for hashing unless `content_hash` is given, and
    once more if a build is needed). Pass `content_hash` when it is already known (the
    database stores it) to skip re-reading the corpus on every process start.
    """
    factory = corpus_factory(source)
    content_hash = content_hash or _content_hash(source, factory)
    directory = Path(cache_dir) / index_key(content_hash, k1=k1, b=b)
    with _lock:
        index = _open.get(directory)
        if index is None:
            index = _load_or_build(directory, factory, content_hash, k1=k1, b=b)
            _open[directory] = index
        return index


def forget_open_indexes() -> None:
    """Drop this process's open indexes (tests; or after deleting a cache directory)."""
    with _lock:
        _open.clear()
        _file_hashes.clear()


def _load_or_build(
    directory: Path, factory: CorpusFactory, content_hash: str, *, k1: float, b: float
) -> BM25Index:
    try:
        return BM25Index.load(directory, expected_content_hash=content_hash)
    except BM25IndexError:
        pass
    directory.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(directory.with_name(directory.name + ".lock")):
        try:  # another process may have finished it while we waited for the lock
            return BM25Index.load(directory, expected_content_hash=content_hash)
        except BM25IndexError:
            pass
        index = BM25Index.build(factory(), directory, k1=k1, b=b)
    if index.content_hash != content_hash:
        raise BM25IndexError(
            f"the corpus changed while {directory} was being built "
            f"(expected {content_hash[:12]}, indexed {index.content_hash[:12]})"
        )
    return index


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
