"""Celery tasks of the harness app: each takes an id and calls one function.

Both go to the "index" queue (harness_app/queues.py): imports and index builds are long,
CPU- and disk-heavy jobs that should not wait behind, or hold up, rollouts.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from harness_app import indexes, queues
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
    """Imports left running by a worker that died are run again or failed (see
    import_jobs.import_jobs_recover): when its worker restarts, or any other starts."""
    try:
        import_jobs.import_jobs_recover(in_hand=queues.tasks_in_hand())
    except Exception:  # a worker must start even if the database or broker is not there
        log.exception("could not recover the imports of dead workers at worker start")
