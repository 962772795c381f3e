"""A harness group as an RL batch: one GRPO group, exported by `rl_export --harness-group`,
and trained on by the built-in trainer."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests import factories
from training.rl.samples import rl_samples_for_harness_group
from trajectories.selectors.harness_tasks import harness_group_view

pytestmark = pytest.mark.django_db


def test_a_group_gives_its_runs_advantages_as_the_group_page_shows_them():
    group = factories.harness_group_finished([1.0, 0.0, 0.5, None])
    build = rl_samples_for_harness_group(group=group)

    trained = {s.episode_id: s.advantage for s in build.sequences}
    assert sorted(trained.values()) == [-0.5, 0.0, 0.5]
    assert build.exclusion_counts() == {"no_reward": 1}
    # The page and the API show the same numbers as the export trains with.
    view = harness_group_view(group=group)
    shown = {row.run.session.episode_id: row.advantage for row in view.rows}
    assert {k: v for k, v in shown.items() if v is not None} == trained
    assert [row.excluded for row in view.rows][-1] == "no_reward: the episode has no reward"


def test_a_group_whose_runs_all_scored_the_same_is_dropped_on_both_sides():
    group = factories.harness_group_finished([1.0, 1.0])
    assert rl_samples_for_harness_group(group=group).dropped_groups
    view = harness_group_view(group=group)
    assert view.dropped and all(row.advantage is None for row in view.rows)


def test_rl_export_writes_a_harness_group(tmp_path: Path):
    pytest.importorskip("pyarrow", reason="rl_export needs pyarrow (the 'train' extra)")
    from training.rl.parquet import read_rl_metadata, read_rl_parquet

    group = factories.harness_group_finished([1.0, 0.0])
    out = tmp_path / "group.parquet"
    printed = io.StringIO()
    call_command("rl_export", "--harness-group", str(group.pk), "--out", str(out), stdout=printed)

    assert f"harness group {group.pk}: 2 sequences from 2 episodes" in printed.getvalue()
    rows = read_rl_parquet(out)
    assert sorted(r.advantage for r in rows) == [-0.5, 0.5]
    assert all(r.sampled_tokens == 6 for r in rows)  # both calls' completions, one chain
    meta = read_rl_metadata(out)
    assert (meta["source"], meta["harness_group_id"]) == ("harness_group", group.pk)


def test_rl_export_names_a_missing_group(tmp_path: Path):
    pytest.importorskip("pyarrow", reason="rl_export needs pyarrow (the 'train' extra)")
    with pytest.raises(CommandError, match="--harness-group 999999: no such group"):
        call_command("rl_export", "--harness-group", "999999", "--out", str(tmp_path / "x.parquet"))


def test_the_trainer_takes_a_harness_group_and_moves_its_runs_by_their_advantage(smollm2_dir):
    from training.rl.trainer import PolicyTrainer, TrainSettings

    group = factories.harness_group_finished([1.0, 0.0])
    sequences = rl_samples_for_harness_group(group=group).sequences
    trainer = PolicyTrainer(smollm2_dir, settings=TrainSettings(loss="cispo", lr=1e-3))
    # On-policy: the recorded logprobs replaced by the trainer's own.
    batch = []
    for seq, logprobs in zip(sequences, trainer.recompute_logprobs(sequences), strict=True):
        it = iter(logprobs)
        rollout = [next(it) if m else 0.0 for m in seq.loss_mask]
        batch.append(dataclasses.replace(seq, rollout_logprobs=rollout))
    before = [sum(lp) for lp in trainer.recompute_logprobs(batch)]
    metrics = trainer.train_step(batch)
    after = [sum(lp) for lp in trainer.recompute_logprobs(batch)]

    moved = {s.advantage: a - b for s, a, b in zip(batch, after, before, strict=True)}
    assert moved[0.5] > 0 and moved[-0.5] < 0, moved
    assert metrics.sequences == 2 and metrics.tokens == 12
