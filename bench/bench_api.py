"""The API under load: the episode list at 100,000 episodes, and SFT export throughput.

Prints figures, asserts nothing. Run from the project root against PostgreSQL:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/harness_bench_api \\
        .venv/bin/python bench/bench_api.py [--episodes 100000] [--export-episodes 100]

- Episode list: GET /api/episodes/ in-process (middleware, token auth, roles, DRF,
  serialisation; no network), as an annotator with a token, over synthetic finished
  episodes with spread metrics and annotation statuses. Latency p50/p95 and SQL queries per
  request for the first page, filtered pages, a page 40 cursors deep and a text search.
- Export throughput: baseline episodes run for real (turn rows, states), approved, then
  exported as chat JSONL; and the token format over synthetic model calls (10 calls of
  ~2,000 prompt tokens per episode). Episodes per second, whole export (query, render,
  hash, write, provenance rows).

The database is migrated and seeded on first use and reused afterwards (delete the
"bench-api" batches to reseed).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("API_THROTTLE_USER", "1000000/minute")

LABEL = "bench-api"


def setup() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def demo_benchmark() -> Any:
    from harness_app.models import Benchmark
    from harness_app.services.benchmarks import benchmark_import

    existing = Benchmark.objects.filter(name="demo").first()
    if existing:
        return existing
    path = ROOT / "harness_app" / "demo_data"
    return Benchmark.objects.get(
        pk=benchmark_import(path=path, name="demo", fmt="beir").benchmark_id
    )


def bench_batch(benchmark: Any, label: str) -> Any:
    from harness_app.models import PolicyConfig, PolicyKind
    from trajectories.models import RolloutBatch

    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    batch = RolloutBatch.objects.filter(ablation_label=label).first()
    return batch or RolloutBatch.objects.create(
        benchmark=benchmark, policy=policy, ablation_label=label, status="completed"
    )


def seed_episodes(count: int) -> Any:
    """`count` finished synthetic episodes, spread over the demo's queries."""
    from django.utils import timezone

    from trajectories.models import Episode, RolloutGroup

    batch = bench_batch(demo_benchmark(), LABEL)
    have = Episode.objects.filter(batch=batch).count()
    if have >= count:
        return batch
    rng = random.Random(7)
    groups = [
        RolloutGroup.objects.get_or_create(batch=batch, query=q)[0]
        for q in batch.benchmark.queries.order_by("pk")
    ]
    statuses = ["none"] * 6 + ["approved", "approved", "rejected", "disputed"]
    started = time.perf_counter()
    rows = []
    for i in range(have, count):
        group = groups[i % len(groups)]
        rows.append(
            Episode(
                group=group,
                batch=batch,
                query_id=group.query_id,
                sample_index=i // len(groups),
                status="completed" if rng.random() > 0.05 else "failed",
                termination_reason=rng.choice(["end_search", "max_turns", "context_budget"]),
                reward=round(rng.random(), 4),
                curated_recall=round(rng.random(), 4),
                final_answer_recall=round(rng.random(), 4),
                trajectory_recall=round(rng.random(), 4),
                tool_diversity=rng.randint(1, 8),
                turns=rng.randint(1, 40),
                annotation_status=rng.choice(statuses),
                finished_at=timezone.now(),
            )
        )
        if len(rows) == 5_000:
            Episode.objects.bulk_create(rows)
            rows = []
    Episode.objects.bulk_create(rows)
    _analyze()
    print(f"seeded {count - have:,} episodes in {time.perf_counter() - started:.1f} s")
    return batch


def _analyze() -> None:
    """Fresh planner statistics, as autovacuum would have them by the time anyone reads."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE trajectories_episode")


def api_client() -> Any:
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from harness_app.roles import Role
    from harness_app.services.users import user_ensure

    user, _ = user_ensure(username="bench-annotator", password="bench-pw-1", role=Role.ANNOTATOR)
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}", HTTP_HOST="localhost")


def timed(client: Any, url: str, params: dict[str, Any], repeat: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url, params)  # warm
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url, params)
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:500]
    ordered = sorted(times)
    return {
        "p50_ms": statistics.median(times),
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "queries": len(queries),
        "rows": len(response.json()["results"]),
    }


def deep_cursor(client: Any, pages: int) -> str:
    url = "/api/episodes/?page_size=50"
    for _ in range(pages):
        url = client.get(url).json()["next"]
    return url


def bench_list(count: int, repeat: int) -> None:
    batch = seed_episodes(count)
    client = api_client()
    question = batch.benchmark.queries.first().text.split()[2]
    cases = {
        "first page, no filter": {},
        "batch + status": {"batch": batch.pk, "status": "completed"},
        "reward 0.9–1, approved": {"reward_min": 0.9, "annotation_status": "approved"},
        "curated_recall ≥ 0.5, turns ≤ 10": {"curated_recall_min": 0.5, "turns_max": 10},
        f"q={question!r}": {"q": question},
    }
    from trajectories.models import Episode

    print(f"\nGET /api/episodes/ over {Episode.objects.count():,} episodes (50 a page)")
    print(f"{'case':38} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'rows':>5}")
    for name, params in cases.items():
        show(name, timed(client, "/api/episodes/", params, repeat))
    show("page 41 by cursor", timed(client, deep_cursor(client, 40), {}, repeat))


def show(name: str, row: dict[str, Any]) -> None:
    figures = f"{row['p50_ms']:8.1f} {row['p95_ms']:8.1f} {row['queries']:8} {row['rows']:5}"
    print(f"{name:38} {figures}")


def export_batch(episodes: int) -> Any:
    """Real baseline episodes on the demo benchmark, approved."""
    from unittest import mock

    from harness_app.models import PolicyConfig, PolicyKind
    from trajectories.models import RolloutBatch
    from trajectories.rollout import episode_run
    from trajectories.services.annotations import annotation_bulk_apply
    from trajectories.services.rollouts import batch_create

    ran = RolloutBatch.objects.filter(created_by__username="bench-researcher").last()
    if ran is not None and ran.episodes.filter(status="completed").count() >= episodes:
        return ran
    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    researcher = _researcher()
    samples = max(1, -(-episodes // demo_benchmark().queries.count()))
    with mock.patch("trajectories.services.rollouts.batch_enqueue"):
        batch = batch_create(
            benchmark=demo_benchmark(),
            policy=policy,
            samples_per_query=samples,
            created_by=researcher,
        )
    started = time.perf_counter()
    for episode_id in batch.episodes.values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    print(
        f"ran {batch.episodes.count()} baseline episodes in {time.perf_counter() - started:.1f} s"
    )
    annotation_bulk_apply(actor=researcher, filters={"batch": batch.pk}, label="approve")
    return batch


def _researcher() -> Any:
    from harness_app.roles import Role
    from harness_app.services.users import user_ensure

    return user_ensure(username="bench-researcher", password="bench-pw-1", role=Role.RESEARCHER)[0]


def add_token_calls(batch: Any, calls: int = 10, prompt: int = 2_000) -> None:
    from trajectories.models import ModelCall, pack_floats, pack_ints

    if ModelCall.objects.filter(episode__batch=batch).exists():
        return
    rows = []
    for episode_id in batch.episodes.values_list("pk", flat=True):
        tokens = list(range(1, prompt + 1))
        for turn in range(calls):
            completion = [7] * 60
            rows.append(
                ModelCall(
                    episode_id=episode_id,
                    turn_index=turn,
                    request={"prompt": "…"},
                    response={"choices": [{"text": "x"}]},
                    prompt_token_ids_blob=pack_ints(tokens),
                    completion_token_ids_blob=pack_ints(completion),
                    completion_logprobs_blob=pack_floats([-0.1] * len(completion)),
                )
            )
            tokens = tokens + completion + [9] * 150
    ModelCall.objects.bulk_create(rows, batch_size=500)


def bench_export(episodes: int) -> None:
    from training.services.exports import sft_export_create, sft_export_run

    batch = export_batch(episodes)
    print(f"\nSFT export of {batch.episodes.count()} approved episodes (batch {batch.pk})")
    for fmt in ("chat", "tokens"):
        if fmt == "tokens":
            add_token_calls(batch)
        export = sft_export_create(filters={"batch": batch.pk}, fmt=fmt, enqueue=False)
        started = time.perf_counter()
        done = sft_export_run(export_id=export.pk)
        seconds = time.perf_counter() - started
        mib = done.manifest["bytes"] / 2**20
        rate = f"{done.episodes / seconds:7.1f} episodes/s, {mib / seconds:6.1f} MiB/s"
        print(
            f"{fmt:7} {done.episodes:5} episodes, {done.records:5} records, {mib:7.1f} MiB "
            f"in {seconds:6.2f} s: {rate}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--export-episodes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    setup()
    from django.db import connection

    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    bench_list(args.episodes, args.repeat)
    bench_export(args.export_episodes)


if __name__ == "__main__":
    main()
