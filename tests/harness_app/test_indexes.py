"""The index lifecycle: built once per content hash, rebuilt (never used) when unsound."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_app import indexes, tasks
from harness_app.harness.retrieval.cache import forget_open_indexes
from harness_app.models import Corpus, IndexStatus
from harness_app.services.benchmarks import benchmark_import
from tests.paths import DEMO_DIR

pytestmark = pytest.mark.django_db


@pytest.fixture
def corpus(data_dir: Path) -> Iterator[Corpus]:
    result = benchmark_import(path=DEMO_DIR, name="demo", fmt="beir")
    yield Corpus.objects.get(pk=result.corpus_id)
    indexes.corpus_retrievers_forget()
    forget_open_indexes()


@pytest.fixture
def statuses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every index status written to a corpus row, in order."""
    seen: list[str] = []
    original = indexes._status_set

    def record(corpus: Corpus, status: str, **kwargs: str) -> None:
        before = (corpus.index_status, corpus.index_error, corpus.index_path)
        original(corpus, status, **kwargs)
        if (corpus.index_status, corpus.index_error, corpus.index_path) != before:
            seen.append(status)

    monkeypatch.setattr(indexes, "_status_set", record)
    return seen


def test_the_build_task_makes_a_searchable_index_and_marks_it_ready(
    corpus: Corpus, data_dir: Path
) -> None:
    tasks.corpus_index_build(corpus.pk)

    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY and corpus.index_error == ""
    assert Path(corpus.index_path).parent == data_dir / "indexes"
    assert corpus.content_hash[:32] in Path(corpus.index_path).name
    hits = indexes.corpus_retriever(corpus).search("who invented the Vell lamp", k=3)
    assert hits and hits[0].doc_id.startswith("Vell_lamp")


def test_a_second_build_finds_the_index_and_builds_nothing(
    corpus: Corpus, statuses: list[str]
) -> None:
    first, built = indexes.corpus_index_ensure(corpus)
    assert built
    second, built_again = indexes.corpus_index_ensure(corpus)

    assert not built_again and second.directory == first.directory
    assert statuses == ["missing", "building", "ready"]  # nothing written the second time


def test_a_corrupt_index_is_rebuilt_not_used(corpus: Corpus, statuses: list[str]) -> None:
    index, _ = indexes.corpus_index_ensure(corpus)
    (index.directory / "postings.weights.npy").write_bytes(b"garbage")
    statuses.clear()

    rebuilt, built = indexes.corpus_index_ensure(corpus)

    assert built and statuses == ["missing", "building", "ready"]
    assert rebuilt.search("Vell lamp", k=1)
    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY


def test_an_index_of_other_content_is_stale_and_rebuilt(
    corpus: Corpus, statuses: list[str]
) -> None:
    index, _ = indexes.corpus_index_ensure(corpus)
    manifest = index.directory / "manifest.json"
    body = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(body | {"content_hash": "0" * 64}))
    statuses.clear()

    rebuilt, built = indexes.corpus_index_ensure(corpus)

    assert built and statuses == ["stale", "building", "ready"]
    assert rebuilt.content_hash == corpus.content_hash


def test_a_failed_build_says_why_on_the_corpus(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(indexes, "open_index", broken)

    with pytest.raises(OSError):
        indexes.corpus_index_ensure(corpus)

    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.FAILED
    assert corpus.index_error == "OSError: No space left on device"


def test_the_retriever_is_opened_once_per_process(
    corpus: Corpus, django_assert_num_queries
) -> None:
    first = indexes.corpus_retriever(corpus)

    with django_assert_num_queries(0):
        assert indexes.corpus_retriever(corpus) is first
    assert len(first) == corpus.doc_count == 54


def test_the_build_task_ignores_a_corpus_that_is_gone(db) -> None:
    tasks.corpus_index_build(987654)  # a stale message from an older database: no error
