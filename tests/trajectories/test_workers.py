"""Rollouts through a real Celery worker process: progress, failures and crash recovery."""

from __future__ import annotations

import time

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from tests.workers import start_worker, wait_until
from trajectories.models import BatchStatus, Episode, EpisodeStatus, RolloutBatch, Turn
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED)


def _finished(batch: RolloutBatch) -> RolloutBatch | None:
    batch.refresh_from_db()
    return batch if batch.status in FINISHED else None


def test_worker_runs_a_baseline_batch_to_completion(live_worker, demo_benchmark, baseline_policy):
    batch = batch_create(
        benchmark=demo_benchmark, policy=baseline_policy, samples_per_query=2, query_limit=3
    )
    wait_until(
        lambda: _finished(batch), timeout=300, what=f"batch {batch.pk}\n{live_worker.log()[-3000:]}"
    )
    assert batch.status == BatchStatus.COMPLETED
    assert batch.episodes_completed == 6
    episodes = Episode.objects.filter(batch=batch)
    assert all(e.turns > 0 and e.metrics for e in episodes)
    assert Turn.objects.filter(episode__batch=batch, index=0).count() == 6


def test_unreachable_vllm_fails_episodes_with_a_reason_and_never_hangs(
    tmp_path, transactional_db, demo_benchmark, unreachable_llm_policy
):
    worker = start_worker(tmp_path, extra_env={"VLLM_RETRIES": "1"})
    try:
        batch = batch_create(benchmark=demo_benchmark, policy=unreachable_llm_policy, query_limit=2)
        wait_until(
            lambda: _finished(batch), timeout=300, what=f"batch {batch.pk}\n{worker.log()[-3000:]}"
        )
    finally:
        worker.kill()
    assert batch.status == BatchStatus.FAILED
    assert batch.episodes_failed == 2
    assert set(
        Episode.objects.filter(batch=batch).values_list("termination_reason", flat=True)
    ) == {"model_unreachable"}


def test_sigkilled_worker_mid_episode_then_episode_completes_exactly_once(
    tmp_path, transactional_db, demo_benchmark
):
    search = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
    stop = {"tool": "end_search", "arguments": {"reasoning": "done"}}
    with FakeOpenAIServer(actions=[search, search, search, stop], hold_call=3) as fake:
        policy = PolicyConfig.objects.create(
            name="fake",
            kind=PolicyKind.OPENAI,
            base_url=fake.base_url,
            model="fake",
            tool_call_format="json_schema",
        )
        first = start_worker(tmp_path / "w1", extra_env={"EPISODE_STALE_AFTER_S": "2"})
        try:
            batch = batch_create(benchmark=demo_benchmark, policy=policy, query_limit=1)
            episode = batch.episodes.get()
            assert fake.held.wait(timeout=90), first.log()[-3000:]
            assert Turn.objects.filter(episode=episode).count() >= 2  # provably mid-episode
        finally:
            first.kill()
        time.sleep(2.5)  # let the dead attempt's heartbeat go stale
        fake.actions = [search, stop]
        second = start_worker(tmp_path / "w2", extra_env={"EPISODE_STALE_AFTER_S": "2"})
        try:
            wait_until(
                lambda: _finished(batch), timeout=300, what=f"recovery\n{second.log()[-3000:]}"
            )
        finally:
            second.kill()
    episode.refresh_from_db()
    assert episode.status == EpisodeStatus.COMPLETED
    assert episode.attempts == 2
    indexes = list(Turn.objects.filter(episode=episode).values_list("index", flat=True))
    assert indexes == list(range(len(indexes)))  # no duplicates, no orphans from attempt 1
    assert (batch.episodes_completed, batch.episodes_failed) == (1, 0)
