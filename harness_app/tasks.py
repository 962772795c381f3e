"""Celery tasks of the harness app: each takes an id, loads the row and calls one function.

Both are sent to the "index" queue (INDEX_QUEUE, named at enqueue time by services.py, as
Celery deprecates a queue on the task itself): imports and index builds are long, CPU- and
disk-heavy jobs that should not wait behind, or hold up, rollouts.
"""

from __future__ import annotations

import logging

from celery import shared_task

from harness_app import indexes, services
from harness_app.models import Corpus

logger = logging.getLogger(__name__)

INDEX_QUEUE = "index"


@shared_task
def corpus_index_build(corpus_id: int) -> None:
    corpus = Corpus.objects.filter(pk=corpus_id).first()
    if corpus is None:
        logger.info("corpus %s is gone; nothing to index", corpus_id)
        return
    indexes.corpus_index_ensure(corpus)


@shared_task
def import_job_run(job_id: int) -> None:
    services.import_job_run(job_id=job_id)
