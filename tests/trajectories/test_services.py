"""Batches are validated, episodes persist every turn, and an episode completes once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from trajectories.models import (
    BatchStatus,
    CuratedItem,
    Episode,
    EpisodeStatus,
    EvidenceNode,
    RolloutBatch,
    Turn,
)
from trajectories.rollout import episode_run
from trajectories.selectors.turns import turn_state, turn_states
from trajectories.services.rollouts import (
    BatchParameterError,
    batch_cancel,
    batch_create,
    episode_claim,
)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"samples_per_query": 0}, "samples_per_query must be between 1 and 64, got 0"),
        ({"max_turns": 1000}, "max_turns must be between 1 and 200, got 1000"),
        ({"ablate": ["telepathy"]}, "telepathy"),
        ({"termination_policy": "whenever"}, "termination_policy 'whenever' is not one of"),
        ({"reward_weights": {"f2": "lots"}}, "f2"),
    ],
)
def test_bad_batch_parameters_are_refused_with_the_reason(
    demo_benchmark, baseline_policy, kwargs, message
):
    with pytest.raises(BatchParameterError, match=message):
        batch_create(benchmark=demo_benchmark, policy=baseline_policy, **kwargs)
    assert RolloutBatch.objects.count() == 0


def test_batch_has_one_group_per_query_and_enqueues_on_commit(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        batch = batch_create(
            benchmark=demo_benchmark, policy=baseline_policy, samples_per_query=3, query_limit=4
        )
    assert batch.groups.count() == 4
    assert batch.episodes.count() == batch.episodes_total == 12
    assert sorted(set(batch.episodes.values_list("sample_index", flat=True))) == [0, 1, 2]
    assert len(callbacks) == 1  # nothing is sent to the broker before the rows exist


def _run_first_episode(batch: RolloutBatch) -> Episode:
    episode = batch.episodes.order_by("pk").first()
    episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    return episode


def test_baseline_episode_persists_turns_metrics_and_final_state(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=1)
    episode = _run_first_episode(batch)
    assert episode.status == EpisodeStatus.COMPLETED, episode.error
    turns = list(Turn.objects.filter(episode=episode))
    assert [t.index for t in turns] == list(range(len(turns)))
    # Turn 0 is the reset; the closing end_search-only turn is not a counted turn.
    assert turns[-1].tool_calls[-1]["name"] == "end_search"
    assert episode.turns == episode.metrics["turns"] <= len(turns) - 2
    assert "WORKINGMEMORY" in turns[-1].observation.upper()
    # Each call's result is stored as sent back, and appears in the whole observation.
    first = turns[1]
    assert len(first.tool_results) == len(first.tool_calls) > 0
    assert first.tool_results[0]["content"] in first.observation
    assert episode.curated_recall == episode.metrics["curated_recall"]
    assert episode.reward is not None and "total" in episode.reward_components
    states = turn_states(episode=episode)
    assert len(states) == len(turns)
    assert any(t.state_is_delta for t in turns) or len(turns) == 1
    assert CuratedItem.objects.filter(episode=episode).count() == len(states[-1]["curated"])
    assert turn_state(episode=episode, index=len(turns) - 1) == states[-1]
    assert states[-1]["turn"] == len(turns) - 1
    assert EvidenceNode.objects.filter(episode=episode, kind="document").exists()
    batch.refresh_from_db()
    assert (batch.episodes_completed, batch.status) == (1, BatchStatus.COMPLETED)


def test_rerunning_a_finished_episode_changes_nothing(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=1)
    episode = _run_first_episode(batch)
    turns = Turn.objects.filter(episode=episode).count()
    assert episode_run(episode_id=episode.pk).startswith("skipped")
    batch.refresh_from_db()
    assert batch.episodes_completed == 1
    assert Turn.objects.filter(episode=episode).count() == turns


def test_a_crashed_attempt_is_wiped_and_the_episode_completes_once(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks, settings
):
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=1)
    episode = batch.episodes.get()
    crashed = episode_claim(episode_id=episode.pk)
    Turn.objects.create(episode=episode, index=0, observation="half-written", state={})
    # While the crashed attempt's heartbeat is fresh, nobody else may take the episode.
    assert episode_claim(episode_id=episode.pk) is None
    Episode.objects.filter(pk=episode.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.EPISODE_STALE_AFTER_S + 1)
    )
    episode = _run_first_episode(batch)
    assert episode.attempts == crashed.attempt + 1
    assert not Turn.objects.filter(episode=episode, observation="half-written").exists()
    assert Turn.objects.filter(episode=episode, index=0).count() == 1
    batch.refresh_from_db()
    assert (batch.episodes_completed, batch.episodes_failed) == (1, 0)


def test_cancel_stops_pending_episodes(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=3)
    assert batch_cancel(batch=batch) == 3
    batch.refresh_from_db()
    assert batch.status == BatchStatus.CANCELLED
    assert set(batch.episodes.values_list("status", flat=True)) == {EpisodeStatus.CANCELLED}
    assert episode_run(episode_id=batch.episodes.first().pk).startswith("skipped")


def test_unreachable_model_fails_the_episode_with_its_reason(
    demo_benchmark, unreachable_llm_policy, django_capture_on_commit_callbacks, settings
):
    settings.VLLM_RETRIES = 1
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=unreachable_llm_policy, query_limit=1)
    episode = _run_first_episode(batch)
    assert episode.status == EpisodeStatus.FAILED
    assert episode.termination_reason == "model_unreachable"
    assert episode.model_calls.count() == 2  # the call and its retry, both recorded
    assert all(call.error.startswith("model_unreachable") for call in episode.model_calls.all())


def test_a_database_error_mid_episode_gives_the_episode_back_for_the_retry(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks, monkeypatch
):
    from django.db import OperationalError

    from trajectories.services import rollouts

    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=1)
    episode = batch.episodes.get()
    real = rollouts.turn_record
    calls = {"n": 0}

    def flaky(**kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OperationalError("database is locked")
        return real(**kwargs)

    monkeypatch.setattr(rollouts, "turn_record", flaky)
    with pytest.raises(OperationalError):
        episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    assert episode.status == EpisodeStatus.PENDING  # not stuck "running" until it goes stale
    assert episode_run(episode_id=episode.pk).startswith("end_search")
    episode.refresh_from_db()
    assert (episode.status, episode.attempts) == (EpisodeStatus.COMPLETED, 2)
