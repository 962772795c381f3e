"""The rollout service at scale, simulated: N Celery workers play LLM episodes against an
upstream with injected latency, on PostgreSQL and Redis, while a trainer pulls and acks.

Prints figures, asserts nothing. Run from the project root (PostgreSQL and Redis up):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/harness_scale \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python bench/bench_scale_sim.py --queries 128 --group-size 8 --turns 40 \\
        --workers 2 --concurrency 16 --latency-s 0.5

- The upstream is tests/fakes/openai_server.py in its own process: vLLM's OpenAI API
  (chat, token-in completions, /tokenize, token ids and logprobs), each completion held
  `--latency-s` first. Its policy searches every turn and, with probability 0.25 a turn,
  answers with text that is no tool call; three such in a row end the episode on format
  errors, so rewards differ within groups and most groups carry a signal.
- The rollout service's request: `--queries` groups wanted, `--group-size` episodes each,
  `--turns` turns at most, over-sampled by `--over-sample`. A trainer thread pulls (up to
  16 groups, long-polling) and acks as groups arrive.
- Figures: episodes/s overall and per worker; the trainer's pull latency and what it
  received; rows and bytes per episode
  (pg_total_relation_size of every table, before and after); CPU seconds and utilisation
  of the workers, PostgreSQL (every postgres process), Redis and the upstream over the
  run, which says which part saturates. The machine's other load counts in PostgreSQL's
  and Redis's figures if they serve others too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

HOTPOTQA = ROOT.parent / "shared" / "data" / "hotpotqa-dev500"
COMPOSITIONAL = ROOT / "tests" / "fixtures" / "compositional"
FORMAT_SLIP = 0.25
WORDS = [
    "river",
    "castle",
    "novel",
    "film",
    "album",
    "band",
    "author",
    "city",
    "war",
    "prize",
    "team",
    "museum",
]


# --- the upstream, in its own process --------------------------------------------------------


def _reply(n: int, body: dict[str, Any]) -> str:
    if random.random() < FORMAT_SLIP:
        return "I think I should look further."
    query = " ".join(random.sample(WORDS, 3))
    return json.dumps({"tool": "search_corpus", "arguments": {"query": query}})


def serve_upstream(latency_s: float) -> None:
    from tests.fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer(
        reply=_reply, delay_s=latency_s, keep_requests=False, max_model_len=10**7
    ) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


# --- measurements ----------------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def pids_named(name: str) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == name]


class BackendSampler(threading.Thread):
    """CPU of the PostgreSQL backends serving this database only (the server may serve
    others): pg_stat_activity's pids sampled twice a second, each backend's last reading
    kept. A backend that lives less than a sampling interval is missed."""

    def __init__(self, worker_pids: list[int] | None = None) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.worker_pids = worker_pids or []
        self.worker_rss_mb: dict[int, float] = {}  # each worker's largest resident set

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid()"
                    )
                    pids = [row[0] for row in cursor.fetchall()]
                for pid in pids:
                    used = cpu_seconds([pid])
                    if used:
                        self.seen[pid] = used
                for pid in self.worker_pids:
                    rss = resident_mb(pid)
                    self.worker_rss_mb[pid] = max(rss, self.worker_rss_mb.get(pid, 0.0))
                self.stop.wait(0.5)
        finally:
            connection.close()


def resident_mb(pid: int) -> float:
    """A process's resident set in MB from /proc (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def table_sizes() -> dict[str, tuple[int, int]]:
    """Rows and bytes (pg_total_relation_size: heap, indexes, TOAST) of every table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public'"
        )
        sizes = dict(cursor.fetchall())
        out = {}
        for table, size in sizes.items():
            cursor.execute(f'SELECT count(*) FROM "{table}"')
            out[table] = (cursor.fetchone()[0], size)
    return out


# --- set-up ----------------------------------------------------------------------------------


def setup() -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        raise SystemExit("bench_scale_sim measures PostgreSQL: set DATABASE_URL=postgres://...")
    call_command("migrate", verbosity=0)


def benchmark_and_policy(base_url: str) -> tuple[Any, Any]:
    from harness_app.indexes import corpus_index_ensure
    from harness_app.models import Benchmark, PolicyConfig, PolicyKind
    from harness_app.services.benchmarks import benchmark_import

    path, name = (HOTPOTQA, "scale-hotpotqa") if HOTPOTQA.is_dir() else (COMPOSITIONAL, "scale")
    bench = Benchmark.objects.filter(name=name).first()
    if bench is None:
        bench = Benchmark.objects.get(
            pk=benchmark_import(path=path, name=name, fmt="beir").benchmark_id
        )
    corpus_index_ensure(bench.corpus)  # built once here, not raced by the workers
    policy, _ = PolicyConfig.objects.update_or_create(
        name="scale-sim-upstream",
        defaults={
            "kind": PolicyKind.OPENAI,
            "base_url": base_url,
            "model": "fake-model",
            "tool_call_format": "json_schema",
            # The fake tokenises one token per character: append mode would hit its
            # context budget within a few turns of search results.
            "context_mode": "rerender",
            "sampling": {"temperature": 1.0, "max_tokens": 64},
        },
    )
    return bench, policy


def start_workers(n: int, concurrency: int, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    workers = []
    for i in range(n):
        log = (log_dir / f"worker{i}.log").open("wb")
        workers.append(
            subprocess.Popen(
                [
                    sys.executable, "-m", "celery", "-A", "config", "worker",
                    "--queues=rollouts_llm", "--pool=threads", f"--concurrency={concurrency}",
                    f"--hostname=scale{i}@%h", "--without-gossip", "--without-mingle",
                    "--loglevel=WARNING",
                ],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        )  # fmt: skip
    return workers


# --- the trainer -----------------------------------------------------------------------------


class Trainer(threading.Thread):
    """Pulls and acks until the request closes; keeps each pull's latency."""

    def __init__(self, request: Any, max_groups: int) -> None:
        super().__init__(daemon=True)
        self.request = request
        self.max_groups = max_groups
        self.pull_s: list[float] = []
        self.groups = 0
        self.sequences = 0
        self.tokens = 0
        self.first_group_s: float | None = None
        self.status = ""
        self.counts: dict[str, int] = {}
        self.started = time.perf_counter()

    def run(self) -> None:
        from django.db import connection

        from training.services.rollout_service import rollout_group_ack, rollout_groups_pull

        try:
            while True:
                t0 = time.perf_counter()
                pulled = rollout_groups_pull(
                    request=self.request, trainer_version=0, max_groups=self.max_groups
                )
                self.pull_s.append(time.perf_counter() - t0)
                for group in pulled.groups:
                    rollout_group_ack(request=self.request, token=group["lease"])
                    self.sequences += len(group["samples"])
                    self.tokens += sum(
                        len(s["prompt_ids"]) + len(s["response_ids"]) for s in group["samples"]
                    )
                if pulled.groups and self.first_group_s is None:
                    self.first_group_s = time.perf_counter() - self.started
                self.groups += len(pulled.groups)
                self.status, self.counts = pulled.status, pulled.counts
                if pulled.status != "open":
                    return
                time.sleep(0.5)
        finally:
            connection.close()


# --- the run ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    setup()
    from training.services.rollout_service import rollout_request_create
    from trajectories.models import Episode, EpisodeStatus

    upstream = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", f"--latency-s={args.latency_s}"],
        cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert upstream.stdout is not None
    base_url = upstream.stdout.readline().decode().strip()
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        bench, policy = benchmark_and_policy(base_url)
        before = table_sizes()
        workers = start_workers(args.workers, args.concurrency, log_dir)
        time.sleep(args.worker_start_s)
        parts = {
            "workers": lambda: [w.pid for w in workers],
            "postgresql": lambda: pids_named("postgres"),
            "redis": lambda: pids_named("redis-server"),
            "upstream": lambda: [upstream.pid],
        }
        cpu0 = {k: cpu_seconds(f()) for k, f in parts.items()}
        sampler = BackendSampler([w.pid for w in workers])
        sampler.start()
        started = time.perf_counter()
        request = rollout_request_create(
            benchmark=bench,
            policy=policy,
            group_size=args.group_size,
            groups_wanted=args.queries,
            over_sample=args.over_sample,
            max_turns=args.turns,
            lease_s=600,
        )
        trainer = Trainer(request, args.pull_groups)
        trainer.start()
        trainer.join(timeout=args.timeout_s)
        wall = time.perf_counter() - started
        cpu = {k: cpu_seconds(f()) - cpu0[k] for k, f in parts.items()}
        sampler.stop.set()
        sampler.join()
        cpu["postgresql_this_db_backends"] = sum(sampler.seen.values())
        after = table_sizes()
    finally:
        for process in [*workers, upstream]:
            process.kill()
            process.wait()
    assert request.batch is not None
    episodes = Episode.objects.filter(batch=request.batch)
    done = episodes.filter(status__in=[EpisodeStatus.COMPLETED, EpisodeStatus.FAILED])
    finished, turns = done.count(), sum(done.values_list("turns", flat=True))
    rows = {t: after[t][0] - before.get(t, (0, 0))[0] for t in after}
    sizes = {t: after[t][1] - before.get(t, (0, 0))[1] for t in after}
    return {
        "workload": {
            "queries": args.queries,
            "group_size": args.group_size,
            "turns": args.turns,
            "over_sample": args.over_sample,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "latency_s": args.latency_s,
            "pull_groups": args.pull_groups,
            "load_average_after": [round(x, 1) for x in os.getloadavg()],
            "benchmark": bench.name,
            "cores": os.cpu_count(),
        },
        "wall_s": round(wall, 1),
        "request": {"status": trainer.status, "counts": trainer.counts},
        "episodes_finished": finished,
        "turns_played": turns,
        "episodes_per_s": round(finished / wall, 3),
        "episodes_per_s_per_worker": round(finished / wall / args.workers, 3),
        "turns_per_s": round(turns / wall, 1),
        "groups_delivered": trainer.groups,
        "sequences_delivered": trainer.sequences,
        "tokens_delivered": trainer.tokens,
        "first_group_after_s": trainer.first_group_s and round(trainer.first_group_s, 1),
        "pull_ms_median": round(1000 * statistics.median(trainer.pull_s), 1),
        "pull_ms_max": round(1000 * max(trainer.pull_s), 1),
        "rows_per_episode": {t: round(n / max(finished, 1), 1) for t, n in rows.items() if n},
        "bytes_per_episode": round(sum(sizes.values()) / max(finished, 1)),
        "bytes_per_episode_by_table": {
            t: round(b / max(finished, 1)) for t, b in sorted(sizes.items()) if b > 0
        },
        "worker_peak_rss_mb": sorted(round(v) for v in sampler.worker_rss_mb.values()),
        "cpu_s": {k: round(v, 1) for k, v in cpu.items()},
        "cpu_utilisation_of_one_core": {k: round(v / wall, 2) for k, v in cpu.items()},
    }


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--queries", type=int, default=128, help="groups wanted")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--over-sample", type=float, default=1.0)
    p.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    p.add_argument("--concurrency", type=int, default=16, help="threads per worker")
    p.add_argument("--latency-s", type=float, default=0.5, help="upstream delay per completion")
    p.add_argument("--pull-groups", type=int, default=4, help="the trainer's max_groups")
    p.add_argument("--timeout-s", type=float, default=3600)
    p.add_argument("--worker-start-s", type=float, default=8.0)
    p.add_argument("--log-dir", default="/tmp/bench_scale_sim")
    p.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    cli = parse_args()
    if cli.serve_upstream:
        serve_upstream(cli.latency_s)
    else:
        print(json.dumps(run(cli), indent=2))
