"""A rollout batch read from the database into RL rows, and `rl_export` to Parquet."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests import factories
from training.rl.samples import rl_samples_for_batch
from trajectories.models import (
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    pack_floats,
    pack_ints,
)
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


def _record_calls(episode, *, version="v1", failed_call=False):
    """Two turns that prefix-merge; logprobs are exact in float32 (powers of two)."""
    calls = [
        ([1, 2, 3], [10, 11], [-0.5, -0.25], version),
        ([1, 2, 3, 10, 11, 20, 21], [12, 2], [-1.0, -0.125], version),
    ]
    rows = [
        ModelCall(
            episode=episode,
            turn_index=turn,
            request={},
            prompt_token_ids_blob=pack_ints(prompt),
            completion_token_ids_blob=pack_ints(completion),
            completion_logprobs_blob=pack_floats(logprobs),
            policy_version=v,
        )
        for turn, (prompt, completion, logprobs, v) in enumerate(calls)
    ]
    if failed_call:  # a timed-out retry: no tokens, never trained on
        rows.append(ModelCall(episode=episode, turn_index=1, request={}, error="model_timeout"))
    ModelCall.objects.bulk_create(rows)


@pytest.fixture
def rollout_batch() -> RolloutBatch:
    """Group A: rewards 1.0, 0.0 and a failed episode; group B: 0.5, 0.5, 0.5."""
    batch = batch_create(
        benchmark=factories.demo_benchmark(),
        policy=factories.baseline_policy(),
        query_limit=2,
        samples_per_query=3,
    )
    first = batch.groups.order_by("pk")[0]
    outcomes = {
        (first.pk, 0): (EpisodeStatus.COMPLETED, "end_search", 1.0),
        (first.pk, 1): (EpisodeStatus.COMPLETED, "max_turns", 0.0),
        (first.pk, 2): (EpisodeStatus.FAILED, "model_timeout", 0.001),
    }
    for episode in batch.episodes.all():
        status, reason, reward = outcomes.get(
            (episode.group_id, episode.sample_index), (EpisodeStatus.COMPLETED, "end_search", 0.5)
        )
        episode.status, episode.termination_reason, episode.reward = status, reason, reward
        episode.save()
        _record_calls(episode, failed_call=episode.sample_index == 0)
    return batch


def test_batch_samples_carry_rewards_advantages_and_masks(rollout_batch, django_assert_num_queries):
    with django_assert_num_queries(2):  # episodes, then calls: no query per episode
        build = rl_samples_for_batch(batch=rollout_batch)
    first, second = rollout_batch.groups.order_by("pk")
    assert build.kept_groups == [first.pk]
    assert build.dropped_groups == [second.pk]
    by_reward = {s.reward: s for s in build.sequences}
    assert set(by_reward) == {1.0, 0.0}
    assert by_reward[1.0].advantage == 0.5 and by_reward[0.0].advantage == -0.5
    seq = by_reward[1.0]
    assert seq.prompt_ids == [1, 2, 3]
    assert seq.response_ids == [10, 11, 20, 21, 12, 2]
    assert seq.loss_mask == [1, 1, 0, 0, 1, 1]
    assert seq.rollout_logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0, -0.125]
    assert build.exclusion_counts() == {"not_completed": 1, "zero_variance_group": 3}
    failed = next(e for e in build.exclusions if e.reason.startswith("not_completed"))
    assert failed.reason == "not_completed: status failed (model_timeout)"


def test_an_episode_spanning_two_policy_versions_is_excluded(rollout_batch):
    episode = rollout_batch.episodes.get(reward=1.0)
    ModelCall.objects.filter(episode=episode, turn_index=1).update(policy_version="v2")
    build = rl_samples_for_batch(batch=rollout_batch.pk)
    reasons = {e.episode_id: e.reason for e in build.exclusions}
    assert reasons[episode.pk] == "mixed_policy_versions: calls from 'v1', 'v2'"
    # Its sibling is then alone in its group: no comparison, no training signal.
    assert build.sequences == []


def test_rl_export_writes_parquet_that_reads_back_typed(rollout_batch, tmp_path: Path):
    pa = pytest.importorskip("pyarrow", reason="rl_export needs pyarrow (the 'train' extra)")
    pq = pytest.importorskip("pyarrow.parquet")
    from training.rl.parquet import read_rl_metadata, read_rl_parquet

    out = tmp_path / "rl" / "batch.parquet"
    printed = io.StringIO()
    call_command("rl_export", "--batch", str(rollout_batch.pk), "--out", str(out), stdout=printed)
    assert "2 sequences from 2 episodes, 1 groups kept, 1 dropped" in printed.getvalue()
    assert "excluded: not_completed 1, zero_variance_group 3" in printed.getvalue()
    table = pq.read_table(out)
    assert table.num_rows == 2
    types = {f.name: f.type for f in table.schema}
    assert types["prompt_ids"] == types["response_ids"] == pa.list_(pa.int32())
    assert types["loss_mask"] == pa.list_(pa.int8())
    assert types["rollout_logprobs"] == pa.list_(pa.float32())
    assert types["reward"] == types["advantage"] == pa.float64()
    assert types["group_id"] == types["episode_id"] == pa.int64()
    rows = sorted(table.to_pylist(), key=lambda r: -r["advantage"])
    assert [r["advantage"] for r in rows] == [0.5, -0.5]
    assert rows[0]["loss_mask"] == [1, 1, 0, 0, 1, 1]
    assert rows[0]["rollout_logprobs"] == [-0.5, -0.25, 0.0, 0.0, -1.0, -0.125]
    assert rows[1]["termination_reason"] == "max_turns"
    # The whole batch round-trips as sequences the built-in trainer can take.
    assert read_rl_parquet(out) == rl_samples_for_batch(batch=rollout_batch).sequences
    meta = read_rl_metadata(out)
    assert (meta["batch_id"], meta["mode"], meta["format_version"]) == (
        rollout_batch.pk,
        "prefix_merge",
        1,
    )
    assert len(meta["exclusions"]) == 4 and len(meta["dropped_groups"]) == 1
    assert not list(out.parent.glob(".*.partial"))


def test_rl_export_names_a_missing_batch(tmp_path: Path):
    pytest.importorskip("pyarrow", reason="rl_export needs pyarrow (the 'train' extra)")
    with pytest.raises(CommandError, match="--batch 999999: no such rollout batch"):
        call_command("rl_export", "--batch", "999999", "--out", str(tmp_path / "x.parquet"))
