"""Builders shared by the API, training and annotation tests (plain functions, no fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services import benchmark_import, user_ensure
from trajectories.models import Episode, EpisodeStatus, RolloutBatch, RolloutGroup
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

DEMO_DIR = Path(__file__).resolve().parents[1] / "harness_app" / "demo_data"


def demo_benchmark() -> Benchmark:
    result = benchmark_import(path=DEMO_DIR, name="demo", fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


def baseline_policy() -> PolicyConfig:
    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    return policy


def user(username: str, role: Role | None) -> Any:
    created, _ = user_ensure(username=username, password="pw-123456", role=role)
    return created


def client_for(account: Any | None) -> APIClient:
    """An API client sending the account's token; without an account, no credentials."""
    client = APIClient()
    if account is not None:
        token, _ = Token.objects.get_or_create(user=account)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def run_batch(
    benchmark: Benchmark, policy: PolicyConfig, *, queries: int = 2, samples: int = 1
) -> RolloutBatch:
    """A batch whose baseline episodes ran here, turn rows and all (nothing is queued:
    the test's transaction never commits, so batch_create's on_commit never fires)."""
    batch = batch_create(
        benchmark=benchmark, policy=policy, query_limit=queries, samples_per_query=samples
    )
    for episode_id in batch.episodes.order_by("pk").values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    batch.refresh_from_db()
    return batch


def synthetic_episodes(batch: RolloutBatch, count: int, **fields: Any) -> list[Episode]:
    """`count` finished episodes without turns, in one new group of the batch."""
    query = batch.benchmark.queries.exclude(rolloutgroup__batch=batch).first()
    assert query is not None, "the benchmark has no query left for another group"
    group = RolloutGroup.objects.create(batch=batch, query=query)
    defaults: dict[str, Any] = {
        "status": EpisodeStatus.COMPLETED,
        "termination_reason": "end_search",
        "reward": 0.5,
        "curated_recall": 0.5,
        "final_answer_recall": 0.5,
        "trajectory_recall": 0.5,
        "tool_diversity": 3,
        "turns": 5,
        "finished_at": timezone.now(),
    }
    return Episode.objects.bulk_create(
        Episode(group=group, batch=batch, query=query, sample_index=i, **{**defaults, **fields})
        for i in range(count)
    )
