"""Rollout persistence on a real database: per-turn overhead, throughput, rows and bytes.

Prints figures, asserts nothing. Run from the project root against PostgreSQL:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/harness_bench \\
        .venv/bin/python bench/bench_rollouts.py [--episodes 20] [--vllm URL]

- Overhead per turn: the harness step plus writing the turn (state snapshot, observation,
  recall) through trajectories.services, excluding any model time. A scripted 40-turn policy
  (search, curate, read, verify in rotation) keeps the curated set and pool growing.
- Rows and bytes per 40-turn episode: rows in every table the episode writes, and their
  on-disk size from pg_column_size on PostgreSQL.
- Episodes per second per worker process with the baseline policy: sequential
  `episode_run` calls, which is what one Celery worker child does.
- With --vllm URL: a real Celery worker on the thread pool (--concurrency N) runs an LLM
  batch against that server; the figure is the most episodes in flight at once.
The database is migrated and the benchmark is imported on first use; tasks are sent to an
in-memory broker except in the vLLM part, so nothing else runs them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def setup(broker: str) -> None:
    os.environ["CELERY_BROKER_URL"] = broker
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def benchmark(name: str, path: Path) -> Any:
    from harness_app.models import Benchmark
    from harness_app.services.benchmarks import benchmark_import

    existing = Benchmark.objects.filter(name=name).first()
    if existing:
        return existing
    result = benchmark_import(path=path, name=name, fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


class ScriptedPolicy:
    """Forty turns of real tool use without a model: search, curate, read, verify."""

    name = "scripted"

    def reset(self, query_text: str) -> None:
        self.words = [w for w in query_text.split() if len(w) > 3] or ["history"]

    def act(self, observation: Any, state: Any) -> list[Any]:
        from harness_app.harness.types import ToolCall

        turn = state.turn
        uncurated = [d for d in state.pool if d not in state.curated]
        step = turn % 4
        if step == 0 or not uncurated:
            query = " ".join(self.words[turn % len(self.words) :][:3]) or "history"
            return [ToolCall("search_corpus", {"query": f"{query} {turn}"}, "c0")]
        if step == 1:
            ids = uncurated[:3]
            tags = {i: ("high" if n == 0 else "fair") for n, i in enumerate(ids)}
            return [
                ToolCall("curate", {"add_ids": ids, "remove_ids": [], "importance": tags}, "c0")
            ]
        if step == 2:
            return [ToolCall("read_document", {"doc_id": uncurated[0]}, "c0")]
        return [ToolCall("verify", {"doc_ids": uncurated[:2], "claim": " ".join(self.words)}, "c0")]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def per_turn_overhead(bench: Any, episodes: int) -> dict[str, Any]:
    from harness_app.harness.ablation import Ablation
    from harness_app.harness.config import HarnessConfig
    from harness_app.harness.env import SearchHarness
    from harness_app.indexes import corpus_retriever
    from harness_app.models import PolicyConfig, PolicyKind
    from trajectories.rollout import query_spec
    from trajectories.services import rollouts

    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    batch = rollouts.batch_create(
        benchmark=bench, policy=policy, query_limit=episodes, max_turns=40
    )
    retriever = corpus_retriever(bench.corpus)
    env_ms: list[float] = []
    db_ms: list[float] = []
    ids: list[int] = []
    for episode in batch.episodes.select_related("query"):
        claim = rollouts.episode_claim(episode_id=episode.pk)
        assert claim is not None
        config = HarnessConfig(max_turns=40, context_token_limit=10**9)
        env = SearchHarness(retriever, config=config, ablation=Ablation())
        spec = query_spec(episode.query)
        scripted = ScriptedPolicy()
        scripted.reset(spec.text)
        obs = env.reset(spec)
        previous = None
        while not obs.done and env.state.turn < 40:
            calls = scripted.act(obs, env.state)
            started = time.perf_counter()
            obs = env.step(calls)
            stepped = time.perf_counter()
            record = _turn(env, obs, spec, calls)
            rollouts.turn_record(claim=claim, turn=record, previous_state=previous)
            previous = record.state
            env_ms.append((stepped - started) * 1000)
            db_ms.append((time.perf_counter() - stepped) * 1000)
        rollouts.episode_finish(claim=claim, outcome=_outcome(env, spec))
        ids.append(episode.pk)
    total = [a + b for a, b in zip(env_ms, db_ms, strict=True)]
    return {
        "turns": len(total),
        "harness_p50_ms": statistics.median(env_ms),
        "persist_p50_ms": statistics.median(db_ms),
        "total_p50_ms": statistics.median(total),
        "total_p99_ms": percentile(total, 0.99),
        "episode_ids": ids,
    }


def _turn(env: Any, obs: Any, spec: Any, calls: list[Any]) -> Any:
    """The TurnRecord the runner would yield for this step (timings left at zero)."""
    from harness_app.harness.metrics import recall_so_far_from_state
    from harness_app.harness.runner import TurnRecord

    return TurnRecord(
        turn=obs.turn,
        tool_calls=[c.to_json() for c in calls],
        tool_results=[r.to_json() for r in obs.tool_results],
        observation_text=obs.text,
        working_memory=obs.working_memory,
        state=env.state.to_json(),
        recall=recall_so_far_from_state(env.state, spec),
        policy_seconds=0.0,
        env_seconds=0.0,
        terminated=obs.terminated,
        truncated=obs.truncated,
        termination_reason=obs.termination_reason,
    )


def _outcome(env: Any, spec: Any) -> Any:
    from harness_app.harness.metrics import metrics_from_state
    from harness_app.harness.reward import compute_reward
    from trajectories.services.rollouts import EpisodeOutcome

    metrics = metrics_from_state(env.state, spec)
    reward = compute_reward(metrics, max_turns=40)
    return EpisodeOutcome(
        termination_reason=env.state.termination_reason or "max_turns",
        policy_version="scripted",
        metrics=metrics,
        reward=reward,
        state=env.state,
    )


TABLES = {
    "trajectories_turn": "episode_id",
    "trajectories_modelcall": "episode_id",
    "trajectories_curateditem": "episode_id",
    "trajectories_evidencenode": "episode_id",
    "trajectories_evidenceedge": "episode_id",
    "trajectories_verification": "episode_id",
    "trajectories_episode": "id",
}


def rows_and_bytes(episode_id: int) -> tuple[int, int]:
    from django.db import connection

    rows = size = 0
    with connection.cursor() as cursor:
        for table, column in TABLES.items():
            measure = "pg_column_size(t.*)" if connection.vendor == "postgresql" else "0"
            cursor.execute(
                f"SELECT count(*), coalesce(sum({measure}), 0) FROM {table} t "
                f"WHERE t.{column} = %s",
                [episode_id],
            )
            n, b = cursor.fetchone()
            rows, size = rows + n, size + int(b)
    return rows, size


def baseline_throughput(bench: Any, episodes: int) -> float:
    from harness_app.models import PolicyConfig, PolicyKind
    from trajectories.rollout import episode_run
    from trajectories.services.rollouts import batch_create

    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    batch = batch_create(benchmark=bench, policy=policy, query_limit=episodes)
    ids = list(batch.episodes.values_list("pk", flat=True))
    episode_run(episode_id=ids[0])  # warm the index and caches, as a long-lived worker is
    started = time.perf_counter()
    for episode_id in ids[1:]:
        episode_run(episode_id=episode_id)
    return (len(ids) - 1) / (time.perf_counter() - started)


def llm_in_flight(bench: Any, url: str, concurrency: int, episodes: int) -> dict[str, Any]:
    """A thread-pool worker against a real vLLM: the most episodes running at once."""
    from harness_app.models import PolicyConfig, PolicyKind
    from trajectories.models import BatchStatus, Episode, EpisodeStatus
    from trajectories.services.rollouts import batch_create

    model = _served_model(url)
    policy, _ = PolicyConfig.objects.update_or_create(
        name="bench-llm",
        defaults={
            "kind": PolicyKind.OPENAI,
            "base_url": url,
            "model": model,
            "tool_call_format": "json_schema",
            "sampling": {"max_tokens": 96},
        },
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "threads",
            f"--concurrency={concurrency}",
            "-Q",
            "rollouts_llm",
            "--loglevel=WARNING",
        ],
        cwd=ROOT,
        env=dict(os.environ),
        start_new_session=True,
    )
    try:
        batch = batch_create(benchmark=bench, policy=policy, query_limit=episodes, max_turns=3)
        peak, started = 0, time.perf_counter()
        while time.perf_counter() - started < 900:
            batch.refresh_from_db()
            running = Episode.objects.filter(batch=batch, status=EpisodeStatus.RUNNING).count()
            peak = max(peak, running)
            if batch.status in (BatchStatus.COMPLETED, BatchStatus.FAILED):
                break
            time.sleep(0.2)
        seconds = time.perf_counter() - started
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    return {
        "concurrency": concurrency,
        "peak_in_flight": peak,
        "episodes": episodes,
        "seconds": seconds,
        "status": batch.status,
    }


def _served_model(url: str) -> str:
    import httpx

    return str(httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument(
        "--data", type=Path, default=ROOT.parent / "shared" / "data" / "hotpotqa-dev500"
    )
    parser.add_argument(
        "--vllm", default="", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8011/v1"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    broker = os.environ.get("CELERY_BROKER_URL", "") if args.vllm else "memory://"
    setup(broker or "filesystem://")
    from django.db import connection

    source = (
        args.data if (args.data / "corpus.jsonl").is_file() else ROOT / "harness_app" / "demo_data"
    )
    bench = benchmark(f"bench-{source.name}", source)
    print(f"database: {connection.vendor}; benchmark: {bench.name} ({bench.corpus.doc_count} docs)")
    overhead = per_turn_overhead(bench, args.episodes)
    print(
        f"per turn over {overhead['turns']} turns: "
        f"harness p50 {overhead['harness_p50_ms']:.2f} ms, "
        f"persistence p50 {overhead['persist_p50_ms']:.2f} ms, "
        f"total p50 {overhead['total_p50_ms']:.2f} ms / p99 {overhead['total_p99_ms']:.2f} ms"
    )
    sizes = [rows_and_bytes(i) for i in overhead["episode_ids"]]
    print(
        f"per 40-turn episode: {statistics.mean(r for r, _ in sizes):.0f} rows, "
        f"{statistics.mean(b for _, b in sizes) / 1024:.0f} KiB"
        + ("" if connection.vendor == "postgresql" else " (bytes need PostgreSQL)")
    )
    rate = baseline_throughput(bench, args.episodes)
    print(f"baseline policy: {rate:.1f} episodes/s per worker process")
    if args.vllm:
        flight = llm_in_flight(bench, args.vllm, args.concurrency, 2 * args.concurrency)
        print(f"vLLM thread-pool worker: {flight}")


if __name__ == "__main__":
    main()
