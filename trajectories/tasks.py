"""Celery tasks for rollouts, ablation matrices and harness runs: thin wrappers that take
ids and call one service each.

Their rows are recovered after a dead worker by the job kernel's one start-up handler
(harness_app/tasks.py): stale episodes by the sweep in services/resends.py, matrices and
runs by their rows' tasks. Importing the services here registers those, and the
evaluations' subscription to finished batches, in every process."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
)
from django.conf import settings
from django.db import OperationalError, reset_queries

from harness_app import queues
from harness_app.harness import gc_policy
from harness_app.harness.retrieval import kernel
from trajectories.rollout import episode_run
from trajectories.services import ablations, evaluations, harness_runs, resends, rollouts

# Imported for what they register: the evaluations' subscription to finished batches, the
# stale-episode sweep of the job kernel.
__all__ = ["evaluations", "resends"]

log = logging.getLogger(__name__)


@shared_task(
    name=queues.EPISODE_RUN,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=5,
    soft_time_limit=settings.EPISODE_SOFT_TIME_LIMIT_S,
    time_limit=settings.EPISODE_SOFT_TIME_LIMIT_S + 60,
)
def episode_run_task(self: Any, episode_id: int) -> str:
    try:
        return episode_run(episode_id=episode_id)
    except OperationalError:
        raise  # the database blinked: retried with backoff, the claim restarts the episode
    except SoftTimeLimitExceeded:
        rollouts.episode_fail(
            episode_id=episode_id,
            reason="time_limit",
            message="the episode ran past its soft time limit",
        )
        return "time_limit"
    except Exception as exc:
        log.exception("episode %s failed", episode_id)
        message = "".join(traceback.format_exception_only(exc)).strip()
        rollouts.episode_fail(episode_id=episode_id, reason="error", message=message)
        return "error"


@shared_task(name=queues.ABLATION_MATRIX_RUN, acks_late=True, reject_on_worker_lost=True)
def ablation_matrix_run_task(matrix_id: int) -> str:
    """Every condition x run of one matrix, in this process; failures land on the row."""
    matrix = ablations.ablation_matrix_run(matrix_id=matrix_id)
    return "gone" if matrix is None else matrix.status


# A fallback for a run sent without one: each run is sent with its task's timeouts plus a
# margin (harness_runs.run_time_limit), and its own timeouts stop the harness and the
# evaluation first. Celery enforces limits under prefork only; on the threads pool of
# rollouts_llm the run's own timeouts are what holds.
HARNESS_RUN_TIME_LIMIT_S = 2 * harness_runs.MAX_TIMEOUT_S + 300


@shared_task(
    name=queues.HARNESS_RUN,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=HARNESS_RUN_TIME_LIMIT_S,
    time_limit=HARNESS_RUN_TIME_LIMIT_S + 60,
)
def harness_run_task(run_id: int) -> str:
    """One run of a harness group; a crash lands on the run, its session is closed."""
    try:
        return harness_runs.harness_run_execute(run_id=run_id)
    except SoftTimeLimitExceeded:
        return harness_runs.harness_run_fail(run_id=run_id, error="ran past its time limit")


@worker_init.connect
def _bm25_warm_up(**_: Any) -> None:
    """Compile BM25's scorer once, before the pool forks (harness/retrieval/kernel.py):
    every pool process inherits it instead of paying about half a second on a first
    search. A failure is logged here and raised, with its reason, by that first search."""
    try:
        kernel.warm_up(settings.BM25_KERNEL)
    except Exception:
        log.exception("could not load BM25's compiled scorer at worker start")


@worker_init.connect
@worker_process_init.connect
def _gc_setup(**_: Any) -> None:
    """Freeze what the worker loaded and raise the GC thresholds (harness/gc_policy.py):
    in the main process, before the pool forks (children share the frozen pages), and
    again in each pool process after its own set-up."""
    gc_policy.gc_setup()


@task_prerun.connect
def _gc_task_started(**_: Any) -> None:
    gc_policy.gc_task_started()


@task_postrun.connect
def _gc_between_tasks(**_: Any) -> None:
    # With DEBUG on (the default outside production), every connection keeps the text of
    # its last 9,000 queries, token blobs included; Django clears it per web request,
    # nothing did per task. Thread-pool workers hold one connection per thread: in the
    # full-scale simulation each worker grew past 6 GB until one was killed for memory;
    # with the log cleared per task they stay near 0.9 GB (docs/operations.md).
    reset_queries()
    gc_policy.gc_between_tasks()
