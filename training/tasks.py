"""Celery tasks of the training app: each takes an id and calls one service.

SFT exports go to the default "celery" queue: they read the database and write one file,
and must not wait behind rollouts or index builds. RL job steps and SFT jobs go to "training",
served by one process per trainer device (harness_app/queues.py).

SFT exports and SFT jobs left running by a worker that died are failed with the reason by
the job kernel's one start-up handler (harness_app/tasks.py): each is a kind with its task
(`TASK`). RL jobs are not swept: between two steps a job is running with no task in hand,
and each step is acked late, so the broker redelivers it.
"""

from __future__ import annotations

import logging

from celery import shared_task

from harness_app import queues
from training.services import exports, rl_jobs, sft_jobs

log = logging.getLogger(__name__)


@shared_task(name=queues.SFT_EXPORT, acks_late=True, reject_on_worker_lost=True)
def sft_export_task(export_id: int) -> str:
    export = exports.sft_export_run(export_id=export_id)
    return "gone" if export is None else export.status


@shared_task(name=queues.RL_JOB_ADVANCE, acks_late=True, reject_on_worker_lost=True)
def rl_job_advance_task(job_id: int) -> str:
    """One piece of an RL job; it schedules the next piece itself."""
    return rl_jobs.rl_job_tick(job_id=job_id)


@shared_task(name=queues.SFT_JOB_RUN, acks_late=True, reject_on_worker_lost=True)
def sft_job_run_task(job_id: int) -> str:
    """A whole SFT job: train, publish the adapter, record the outcome."""
    job = sft_jobs.sft_job_run(job_id=job_id)
    return "gone" if job is None else job.status
