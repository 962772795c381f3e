"""Celery tasks of the harness app: each takes an id and calls one function.

Both go to the "index" queue (harness_app/queues.py): imports and index builds are long,
CPU- and disk-heavy jobs that should not wait behind, or hold up, rollouts.
"""

from __future__ import annotations

from celery import shared_task

from harness_app import indexes, queues
from harness_app.services import import_jobs


@shared_task(name=queues.CORPUS_INDEX_BUILD)
def corpus_index_build(corpus_id: int) -> None:
    indexes.corpus_index_build(corpus_id=corpus_id)


@shared_task(name=queues.IMPORT_JOB_RUN)
def import_job_run(job_id: int) -> None:
    import_jobs.import_job_run(job_id=job_id)
