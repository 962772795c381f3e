"""The index task's embeddings, their progress on the corpus row, and the policy's retriever.

The encoder is the deterministic `WordEncoder` of tests/harness/test_dense.py, so these
tests check the web app's side (status, progress, failures, choice of retriever) whether
or not the dense extra is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_app import indexes, tasks
from harness_app.harness.retrieval.cache import forget_open_indexes
from harness_app.harness.retrieval.dense import dense_folder
from harness_app.harness.retrieval.encoder import EncoderUnavailableError
from harness_app.harness.retrieval.hybrid import DenseRetriever, HybridRetriever
from harness_app.models import Benchmark, Corpus, IndexStatus, PolicyConfig, RetrieverKind
from tests import factories
from tests.harness.test_dense import WordEncoder

pytestmark = pytest.mark.django_db


class RowWatchingEncoder(WordEncoder):
    """Reads the corpus row after each text, as the benchmark page would while it runs."""

    def __init__(self, corpus_id: int, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.corpus_id = corpus_id
        self.seen: list[tuple[str, int]] = []

    def encode(self, texts, *, progress=None):
        def watch(done: int, total: int) -> None:
            if progress is not None:
                progress(done, total)
            row = Corpus.objects.get(pk=self.corpus_id)
            self.seen.append((row.index_status, row.index_progress))

        return super().encode(texts, progress=watch)


@pytest.fixture
def corpus(data_dir: Path, settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Corpus]:
    settings.DENSE_EMBEDDINGS = "always"
    monkeypatch.setattr(indexes, "PROGRESS_EVERY_S", 0.0)
    benchmark = factories.demo_benchmark()
    yield benchmark.corpus
    indexes.corpus_retrievers_forget()
    forget_open_indexes()


def _use(monkeypatch: pytest.MonkeyPatch, encoder: WordEncoder) -> None:
    monkeypatch.setattr(indexes, "default_encoder", lambda: encoder)


def test_the_index_task_embeds_the_corpus_with_progress_on_the_row(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = RowWatchingEncoder(corpus.pk)
    _use(monkeypatch, encoder)

    tasks.corpus_index_build(corpus.pk)

    statuses = {status for status, _ in encoder.seen}
    percents = [percent for _, percent in encoder.seen]
    assert statuses == {IndexStatus.EMBEDDING}
    assert percents == sorted(percents) and percents[0] < 10 and percents[-1] >= 95
    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY and corpus.index_error == ""
    assert corpus.index_progress == 100
    assert (dense_folder(corpus.index_path) / "embeddings.npy").is_file()
    hybrid = indexes.corpus_searcher(corpus, RetrieverKind.HYBRID)
    assert isinstance(hybrid, HybridRetriever) and hybrid.search("Vell lamp inventor", k=3)


def test_a_second_task_reuses_the_embeddings(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, WordEncoder())
    tasks.corpus_index_build(corpus.pk)
    again = WordEncoder()
    _use(monkeypatch, again)

    tasks.corpus_index_build(corpus.pk)

    assert again.encoded == 0


def test_a_missing_encoder_is_named_and_leaves_bm25_ready(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> WordEncoder:
        raise EncoderUnavailableError("install the dense extra: pip install -e '.[dense]'")

    monkeypatch.setattr(indexes, "default_encoder", missing)

    with pytest.raises(EncoderUnavailableError):
        tasks.corpus_index_build(corpus.pk)

    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY
    assert corpus.index_error.startswith("no dense embeddings: install the dense extra")
    assert not dense_folder(corpus.index_path).exists()
    assert indexes.corpus_retriever(corpus).search("Vell lamp", k=1)


def test_an_encoder_crash_leaves_no_embeddings_and_says_why(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, WordEncoder(fail_after=20))

    with pytest.raises(RuntimeError):
        tasks.corpus_index_build(corpus.pk)

    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY
    assert corpus.index_error == "embedding failed: RuntimeError: encoder crashed"
    folder = Path(corpus.index_path)
    assert not dense_folder(folder).exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".dense.building")]


def test_never_skips_the_embeddings(
    corpus: Corpus, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.DENSE_EMBEDDINGS = "never"
    encoder = WordEncoder()
    _use(monkeypatch, encoder)

    tasks.corpus_index_build(corpus.pk)

    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY and encoder.encoded == 0
    assert not dense_folder(corpus.index_path).exists()
    # A dense policy's first episode embeds the corpus itself.
    assert isinstance(indexes.corpus_searcher(corpus, RetrieverKind.DENSE), DenseRetriever)
    assert encoder.encoded == 54


def test_dense_ann_hnsw_builds_the_graph_with_progress_and_searches_it(
    corpus: Corpus, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("faiss", reason="faiss-cpu (the dense extra) is not installed")
    _use(monkeypatch, WordEncoder())
    tasks.corpus_index_build(corpus.pk)
    settings.DENSE_ANN = "hnsw"
    seen: list[tuple[str, int]] = []
    from harness_app.harness.retrieval import ann

    original = ann._build

    def watched_build(dense, neighbours, ef_construction, progress):
        def watch(done: int, total: int) -> None:
            progress(done, total)
            row = Corpus.objects.get(pk=corpus.pk)
            seen.append((row.index_status, row.index_progress))

        original(dense, neighbours, ef_construction, watch)

    monkeypatch.setattr(ann, "_build", watched_build)

    searcher = indexes.corpus_searcher(corpus, RetrieverKind.DENSE)

    assert isinstance(searcher, DenseRetriever) and searcher.dense.ann is not None
    assert seen == [(IndexStatus.EMBEDDING, 100)]
    assert (dense_folder(corpus.index_path) / ann.GRAPH).is_file()
    corpus.refresh_from_db()
    assert corpus.index_status == IndexStatus.READY
    hits = searcher.search("Vell lamp inventor", k=3)
    exact = indexes.retriever_open(
        "dense", indexes.corpus_retriever(corpus), encoder=WordEncoder(), ann="exact"
    )
    assert [h.doc_id for h in hits] == [h.doc_id for h in exact.search("Vell lamp inventor", 3)]


def test_an_episode_searches_with_its_policys_retriever(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, WordEncoder())
    opened: list[str] = []
    original = indexes.corpus_searcher

    def spy(corpus: Corpus, kind: str = "bm25"):
        opened.append(kind)
        return original(corpus, kind)

    monkeypatch.setattr(indexes, "corpus_searcher", spy)
    policy = PolicyConfig.objects.create(name="hybrid", kind="baseline", retriever="hybrid")
    batch = factories.run_batch(Benchmark.objects.get(corpus=corpus), policy, queries=1)

    assert opened == ["hybrid"]
    episode = batch.episodes.get()
    assert episode.status == "completed", episode.error


def test_the_policy_api_takes_a_retriever_and_refuses_an_unknown_one(researcher_api) -> None:
    body = {"name": "h", "kind": "baseline", "retriever": "hybrid"}
    response = researcher_api.post("/api/policies/", body, format="json")
    assert response.status_code == 201, response.json()
    assert PolicyConfig.objects.get(name="h").retriever == RetrieverKind.HYBRID

    refused = researcher_api.post(
        "/api/policies/", {**body, "name": "s", "retriever": "sparse"}, format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["retriever"] == ['"sparse" is not a valid choice.']
