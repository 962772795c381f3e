"""The reader in the web app: with READER_BASE_URL set, each completed episode is read and
scored; the episode, batch and dashboard pages show answer EM and F1 only when present."""

from __future__ import annotations

import pytest

from harness_app.models import Query
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories import rollout
from trajectories.models import EpisodeStatus
from trajectories.selectors.batches import batch_metrics, batch_summary

pytestmark = pytest.mark.django_db


def _reply(n: int, body: dict) -> str:
    # q01's gold answer is "Vire River"; every other question gets a wrong answer.
    question = body["messages"][1]["content"].rsplit("Question:", 1)[1]
    return "the Vire River." if "Vell lamp" in question else "Paris"


@pytest.fixture
def reader_server(settings):
    rollout._reader_model.cache_clear()
    with FakeOpenAIServer(hosted=True, reply=_reply, model="reader-model") as server:
        settings.READER_BASE_URL = server.base_url
        settings.READER_MODEL = ""
        yield server
    rollout._reader_model.cache_clear()


def test_each_completed_episode_is_read_and_scored(reader_server, batch_of):
    batch = batch_of(query_limit=2, samples_per_query=1)
    episodes = list(batch.episodes.order_by("query__external_id"))
    assert [e.status for e in episodes] == [EpisodeStatus.COMPLETED] * 2
    first, second = (e.metrics for e in episodes)
    assert first["reader_answer"] == "the Vire River"
    assert (first["answer_em"], first["answer_f1"]) == (1.0, 1.0)
    assert (second["answer_em"], second["answer_f1"]) == (0.0, 0.0)
    assert first["reader"]["model"] == "reader-model"  # asked of /v1/models
    assert first["reader"]["doc_ids"]  # the curated set went to the reader
    assert first["curated_recall"] == episodes[0].curated_recall  # the metrics are all kept
    chats = [r for r in reader_server.requests if r["path"].endswith("/chat/completions")]
    assert len(chats) == 2 and all(c["body"]["temperature"] == 0.0 for c in chats)

    means = batch_metrics(batch=batch)["means"]
    assert (means["mean_answer_em"], means["mean_answer_f1"]) == (0.5, 0.5)
    summary = batch_summary(batch=batch)["metrics"]
    assert (summary["answer_em"], summary["answer_f1"]) == (0.5, 0.5)


def test_the_pages_show_the_answer_scores(reader_server, batch_of, researcher_client):
    batch = batch_of(query_limit=2, samples_per_query=1)
    page = researcher_client.get(f"/batches/{batch.pk}/").content.decode()
    assert '<th class="num">Answer EM</th>' in page
    assert 'data-metric="answer_em">0.500<' in page
    dashboard = researcher_client.get("/").content.decode()
    assert '<th class="num">Answer F1</th>' in dashboard
    episode = batch.episodes.get(query__external_id="q01")
    detail = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert "Reader answer" in detail and "the Vire River" in detail and "EM 1" in detail


def test_without_a_reader_nothing_about_answers_shows(ran_batch, researcher_client, settings):
    assert settings.READER_BASE_URL == ""
    episode = ran_batch.episodes.first()
    assert not {"answer_em", "answer_f1", "reader_answer", "reader"} & set(episode.metrics)
    assert "answer_em" not in batch_summary(batch=ran_batch)["metrics"]
    for url in (f"/batches/{ran_batch.pk}/", "/", f"/episodes/{episode.pk}/"):
        page = researcher_client.get(url).content.decode()
        assert "Answer EM" not in page and "Reader answer" not in page, url


def test_an_unreachable_reader_is_recorded_and_the_episode_still_completes(
    settings, batch_of, researcher_client
):
    with FakeOpenAIServer(refuse={"chat/completions": 503}) as server:
        settings.READER_BASE_URL = server.base_url
        settings.READER_MODEL = "fake-model"
        batch = batch_of(query_limit=1, samples_per_query=1)
    episode = batch.episodes.get()
    assert episode.status == EpisodeStatus.COMPLETED
    assert "answer_em" not in episode.metrics
    assert episode.metrics["reader"]["error"].startswith("model_server_error")
    detail = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert "reader failed: model_server_error" in detail


def test_gold_answers_include_the_listed_answer_and_its_aliases(demo_benchmark):
    query = Query.objects.filter(benchmark=demo_benchmark).first()
    assert query is not None
    query.answer = "1990 | nineteen ninety"
    query.metadata = {"answer": ["1990", "nineteen ninety"], "answer_aliases": ["MCMXC"]}
    spec = rollout.query_spec(query)
    assert spec.gold_answers == ("1990", "nineteen ninety", "MCMXC")
