"""Celery tasks of the training app: thin wrappers that take ids and call one service.

SFT exports go to the default "celery" queue (named at send time in services.py): they
read the database and write one file, and must not wait behind rollouts or index builds.
"""

from __future__ import annotations

from celery import shared_task

from training import services


@shared_task(acks_late=True, reject_on_worker_lost=True)
def sft_export_task(export_id: int) -> str:
    export = services.sft_export_run(export_id=export_id)
    return "gone" if export is None else export.status


@shared_task(acks_late=True, reject_on_worker_lost=True)
def rl_job_advance_task(job_id: int) -> str:
    """One piece of an RL job; schedules the next piece itself, so one chain of these
    drives the job and no worker sits waiting while the rollouts run."""
    from training import services_rl

    wait = services_rl.rl_job_advance(job_id=job_id)
    if wait is None:
        return "finished"
    services_rl.rl_job_enqueue(job_id=job_id, countdown=wait)
    return f"next in {wait:.1f}s"
