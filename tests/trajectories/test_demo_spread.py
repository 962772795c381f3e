"""The demo's batches are played by the sampled baseline (setup_demo): the samples of one
question differ, the two ablation conditions give different means, and the same batch
launched again replays the same episodes."""

from __future__ import annotations

import statistics

import pytest
from django.core.management import call_command
from django.test import TestCase

from harness_app.models import Benchmark, PolicyConfig
from trajectories.models import Episode, RolloutBatch
from trajectories.rollout import episode_run, episode_seed
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


def _play(batch: RolloutBatch) -> None:
    for episode_id in batch.episodes.order_by("pk").values_list("pk", flat=True):
        episode_run(episode_id=episode_id)


def _curated(episode: Episode) -> tuple[str, ...]:
    return tuple(sorted(episode.curated_items.values_list("document__external_id", flat=True)))


@pytest.fixture
def demo_batches(settings, tmp_path) -> dict[str, RolloutBatch]:
    settings.DATA_DIR = tmp_path  # the demo's index, this test's own
    with TestCase.captureOnCommitCallbacks():  # played here, not by a worker
        call_command("setup_demo", verbosity=0)
    batches = {b.ablation_label: b for b in RolloutBatch.objects.all()}
    for batch in batches.values():
        _play(batch)
    return batches


def test_the_demo_batches_spread_over_samples_and_conditions(demo_batches) -> None:
    policy = PolicyConfig.objects.get(name="baseline_sampled")
    assert not policy.is_deterministic and policy.rule_temperature == 0.2
    assert {b.policy for b in demo_batches.values()} == {policy}
    assert not Episode.objects.exclude(status="completed").exists()
    versions = set(Episode.objects.values_list("policy_version", flat=True))
    assert versions == {"baseline_sampled@0.2"}

    # Samples of one question differ, in most groups.
    groups = demo_batches["full"].groups.all()
    differing = [g for g in groups if len({_curated(e) for e in g.episodes.all()}) > 1]
    assert len(differing) >= len(groups) // 2

    # The two conditions' means differ.
    def mean(label: str) -> float:
        return statistics.fmean(
            demo_batches[label].episodes.values_list("curated_recall", flat=True)
        )

    assert mean("full") != mean("-verification")


def test_the_same_batch_launched_again_replays_its_episodes(demo_batches) -> None:
    first = demo_batches["full"]
    with TestCase.captureOnCommitCallbacks():
        again = batch_create(
            benchmark=Benchmark.objects.get(name="demo"),
            policy=first.policy,
            samples_per_query=4,
            query_limit=3,
        )
    _play(again)

    def played(batch: RolloutBatch) -> dict[tuple[int, int], tuple]:
        return {
            (e.query_id, e.sample_index): (_curated(e), e.turns, e.reward)
            for e in batch.episodes.filter(query__in=again.groups.values("query"))
        }

    assert played(again) == played(first)


def test_an_evaluation_runs_batches_get_seeds_of_their_own() -> None:
    policy = PolicyConfig(kind="baseline", sampling={"temperature": 0.2, "seed": 10})
    seeds = [
        episode_seed(
            Episode(sample_index=sample),
            RolloutBatch(policy=policy, samples_per_query=2, evaluation_run_index=run),
        )
        for run in (None, 1, 2)
        for sample in (0, 1)
    ]
    assert seeds == [10, 11, 12, 13, 14, 15]
