"""Every Celery queue and task, declared once.

Settings build the task routes from here, the workers' queue lists are printed from here
(`python -m harness_app.queues --pool prefork`, used by scripts/dev-server and the Docker
entrypoint), and tests/config/test_queues.py checks that docker/compose.yaml and
docs/architecture.md name the same queues.

Services enqueue by task name through `enqueue`, so a services module never imports its
tasks module; a tasks module imports its services (a task takes ids, loads nothing itself
and calls one service). The names below are the ones Celery generated before they were
declared here, so messages already in a broker still find their task.

`queues_without_consumers` (queues no live worker serves: /healthz, run_batch --wait) and
`tasks_in_hand` (tasks live workers hold: the sweep for jobs whose worker died) ask the
live workers through Celery's remote control.

This module imports neither Django nor Celery at import time: settings read it (kombu's
Queue is imported only by `kombu_queues`).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Pool = Literal["prefork", "threads"]


@dataclass(frozen=True)
class Queue:
    name: str
    pool: Pool
    work: str


INDEX = "index"
ROLLOUTS = "rollouts"
ROLLOUTS_LLM = "rollouts_llm"
EXPORTS = "celery"  # Celery's default queue
TRAINING = "training"

QUEUES = (
    Queue(INDEX, "prefork", "index builds, uploaded imports"),
    Queue(ROLLOUTS, "prefork", "baseline-policy episodes, ablation matrices (CPU-bound)"),
    Queue(ROLLOUTS_LLM, "threads", "LLM-backed episodes, harness runs (they wait on vLLM)"),
    Queue(EXPORTS, "prefork", "SFT exports"),
    Queue(TRAINING, "prefork", "RL job steps (rollouts, trainer step, publishing), SFT jobs"),
)

CORPUS_INDEX_BUILD = "harness_app.tasks.corpus_index_build"
IMPORT_JOB_RUN = "harness_app.tasks.import_job_run"
EPISODE_RUN = "trajectories.tasks.episode_run_task"
ABLATION_MATRIX_RUN = "trajectories.tasks.ablation_matrix_run_task"
SFT_EXPORT = "training.tasks.sft_export_task"
RL_JOB_ADVANCE = "training.tasks.rl_job_advance_task"
SFT_JOB_RUN = "training.tasks.sft_job_run_task"
HARNESS_RUN = "trajectories.tasks.harness_run_task"

# The queue each task goes to unless its caller names another (an episode of an LLM
# policy goes to ROLLOUTS_LLM: trajectories.services.rollouts.rollout_queue).
TASK_QUEUES = {
    CORPUS_INDEX_BUILD: INDEX,
    IMPORT_JOB_RUN: INDEX,
    EPISODE_RUN: ROLLOUTS,
    ABLATION_MATRIX_RUN: ROLLOUTS,
    SFT_EXPORT: EXPORTS,
    RL_JOB_ADVANCE: TRAINING,
    SFT_JOB_RUN: TRAINING,
    # A harness run waits on its CLI, which waits on the model: a thread each is enough.
    HARNESS_RUN: ROLLOUTS_LLM,
}


def task_routes() -> dict[str, dict[str, str]]:
    """CELERY_TASK_ROUTES: a task sent without a queue (from a shell, say) still lands
    where its workers are."""
    return {task: {"queue": queue} for task, queue in TASK_QUEUES.items()}


def enqueue(
    task_name: str,
    *args: int,
    queue: str | None = None,
    countdown: float | None = None,
    time_limit: float | None = None,
) -> None:
    """Send a registered task by name. Raises kombu's OperationalError when the broker is
    unreachable: each caller says on its own row what that means for its work, and never
    runs the work inline instead. Call it from `transaction.on_commit`, so a worker never
    looks for a row that is not committed yet. `time_limit` replaces the task's own soft
    limit for this call (the hard one is a minute later)."""
    from celery import current_app

    task = current_app.tasks[task_name]
    options: dict[str, Any] = {"queue": queue or TASK_QUEUES[task_name]}
    if countdown is not None:
        options["countdown"] = countdown
    if time_limit is not None:
        options.update(soft_time_limit=time_limit, time_limit=time_limit + 60)
    task.apply_async(args=args, **options)


def queue_names(pool: Pool | None = None) -> list[str]:
    return [q.name for q in QUEUES if pool is None or q.pool == pool]


def kombu_queues() -> list[Any]:
    """CELERY_TASK_QUEUES: what a worker started without --queues consumes."""
    from kombu import Queue as KombuQueue

    return [KombuQueue(name, routing_key=name) for name in queue_names()]


# How long an answer of the live workers is reused: /healthz and every waiting command
# ask at most this often, and each question costs up to CONSUMERS_TIMEOUT_S.
CONSUMERS_CACHE_S = 10.0
CONSUMERS_TIMEOUT_S = 1.0
_consumers_lock = threading.Lock()
_consumers_cache: tuple[float, frozenset[str]] | None = None


def queues_without_consumers(
    names: Sequence[str] | None = None, *, timeout: float = CONSUMERS_TIMEOUT_S
) -> list[str]:
    """The queues among `names` (every declared queue by default) that no live worker
    consumes, in declaration order. Work sent to one of them waits for ever, silently: a
    worker started with `--queues=celery` serves the SFT exports and nothing else.

    Asks every worker for its queues (Celery's `inspect().active_queues()`, waiting at
    most `timeout` seconds for the answers) and reuses the answer for CONSUMERS_CACHE_S.
    Raises kombu's OperationalError when the broker is unreachable: then nobody knows.
    """
    consumed = _consumed_queues(timeout)
    wanted = queue_names() if names is None else list(dict.fromkeys(names))
    return [name for name in wanted if name not in consumed]


def _consumed_queues(timeout: float) -> frozenset[str]:
    global _consumers_cache
    # One question at a time; a caller behind a question that hangs (a broker that never
    # answers) gives up instead of queueing behind it.
    if not _consumers_lock.acquire(timeout=timeout + 1):
        raise TimeoutError("an earlier question to the workers is still waiting")
    try:
        now = time.monotonic()
        if _consumers_cache is not None and now - _consumers_cache[0] < CONSUMERS_CACHE_S:
            return _consumers_cache[1]
        from celery import current_app

        replies = current_app.control.inspect(timeout=timeout).active_queues() or {}
        consumed = frozenset(q["name"] for queues in replies.values() for q in queues or ())
        _consumers_cache = (time.monotonic(), consumed)
        return consumed
    finally:
        _consumers_lock.release()


def consumers_forget() -> None:
    """Drop the cached answer (tests; a caller that has just started a worker)."""
    global _consumers_cache, _in_hand_cache
    with _consumers_lock:
        _consumers_cache = _in_hand_cache = None


# The several worker_ready handlers of one starting worker share one question.
_in_hand_cache: tuple[float, frozenset[tuple[str, tuple[Any, ...]]]] | None = None
IN_HAND_CACHE_S = 5.0


def tasks_in_hand(*, timeout: float = 2.0) -> frozenset[tuple[str, tuple[Any, ...]]]:
    """(task name, args) of every task a live worker is running, holds prefetched or holds
    until its countdown: a job marked running whose task is not among them lost its worker.

    Pings every worker (waiting `timeout` seconds), then asks those that answered for
    their active, reserved and scheduled tasks (each answer awaited as long again, no
    longer than it takes them all to answer), and reuses the result for IN_HAND_CACHE_S.
    A worker that does not answer the ping in time counts as dead, so a worker on the solo
    pool, which cannot answer while it runs a task, must not share a broker with workers
    that recover jobs. Raises kombu's OperationalError when the broker is unreachable.
    """
    global _in_hand_cache
    now = time.monotonic()
    if _in_hand_cache is not None and now - _in_hand_cache[0] < IN_HAND_CACHE_S:
        return _in_hand_cache[1]
    from celery import current_app

    control = current_app.control
    alive = [name for reply in control.ping(timeout=timeout) or () for name in reply]
    requests: list[Any] = []
    if alive:
        inspect = control.inspect(destination=alive, timeout=timeout)
        for replies in (inspect.active(), inspect.reserved()):
            requests += [r for found in (replies or {}).values() for r in found or ()]
        for found in (inspect.scheduled() or {}).values():
            requests += [entry["request"] for entry in found or ()]
    in_hand = {(r["name"], _args(r.get("args"))) for r in requests}
    # A worker asking from its worker_ready handler cannot answer itself, yet may already
    # hold a message (one the broker redelivered after its first worker died).
    from celery.worker import state

    for request in (*state.reserved_requests, *state.active_requests):
        in_hand.add((request.name, _args(request.args)))
    _in_hand_cache = (time.monotonic(), frozenset(in_hand))
    return _in_hand_cache[1]


def _args(raw: Any) -> tuple[Any, ...]:
    # Celery reports a request's args as a list; older workers sent their repr.
    if isinstance(raw, str):
        import ast

        raw = ast.literal_eval(raw)
    return tuple(raw or ())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the Celery queues, comma-separated.")
    parser.add_argument("--pool", choices=("prefork", "threads"), help="only this pool's")
    print(",".join(queue_names(parser.parse_args(argv).pool)))


if __name__ == "__main__":
    main()
