"""Celery tasks of the harness app: each takes an id and calls one function.

Both go to the "index" queue (harness_app/queues.py): imports and index builds are long,
CPU- and disk-heavy jobs that should not wait behind, or hold up, rollouts.

Here too is the one worker start-up handler that recovers every kind of job whose worker
died (harness_app/jobs.py): each app's kinds register what recovery does with their rows.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from harness_app import indexes, jobs, queues
from harness_app.services import import_jobs

log = logging.getLogger(__name__)


@shared_task(name=queues.CORPUS_INDEX_BUILD)
def corpus_index_build(corpus_id: int) -> None:
    indexes.corpus_index_build(corpus_id=corpus_id)


@shared_task(name=queues.IMPORT_JOB_RUN)
def import_job_run(job_id: int) -> None:
    import_jobs.import_job_run(job_id=job_id)


@worker_ready.connect
def _recover_on_start(**_: Any) -> None:
    """Every job kind's rows left running by a worker that died are run again or failed:
    when its worker restarts, or any other starts. jobs.recover logs what it cannot do;
    a worker starts even if the database or the broker is not there."""
    jobs.recover(in_hand=queues.tasks_in_hand)
