"""Uploaded benchmarks: save the file, queue its import, run it and record the outcome."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from harness_app import jobs, queues
from harness_app.harness.beir import BeirFormatError
from harness_app.importers.records import ImportProgress, ImportRejected
from harness_app.importers.uploads import UPLOAD_FORMATS, upload_format, upload_source_path
from harness_app.models import ImportJob, ImportStatus
from harness_app.services.benchmarks import benchmark_import, benchmark_name_clean

logger = logging.getLogger(__name__)


def import_job_create(
    *,
    upload: UploadedFile,
    name: str,
    split: str,
    replace: bool,
    created_by: User | None,
    fmt: str = "auto",
) -> ImportJob:
    """Save an uploaded zip (a folder) or .json/.jsonl file and queue its import.

    The format is `fmt`, or detected from the saved file when "auto"; a file the format
    can't be told of, or of the wrong kind for `fmt`, is refused here and nothing is kept.
    """
    name = benchmark_name_clean(name)
    suffix = Path(upload.name or "").suffix.lower()
    if suffix not in UPLOAD_FORMATS:
        raise ImportRejected("upload a .zip of a benchmark folder, or a .json or .jsonl file")
    folder = settings.DATA_DIR / "uploads" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    target = folder / f"upload{suffix}"
    with open(target, "wb") as sink:
        for chunk in upload.chunks():
            sink.write(chunk)
    try:
        fmt = upload_format(target, fmt)
    except ImportRejected as exc:
        shutil.rmtree(folder, ignore_errors=True)
        message = str(exc).replace(target.name, upload.name or target.name)
        raise ImportRejected(message) from None
    return _import_job_queue(
        name=name,
        fmt=fmt,
        split=split,
        replace=replace,
        upload_path=target,
        created_by=created_by,
    )


@transaction.atomic
def _import_job_queue(
    *,
    name: str,
    fmt: str,
    split: str,
    replace: bool,
    upload_path: Path,
    created_by: User | None,
) -> ImportJob:
    job = ImportJob.objects.create(
        name=name,
        fmt=fmt,
        split=split,
        replace=replace,
        upload_path=str(upload_path),
        created_by=created_by,
    )
    jobs.enqueue(job, queues.IMPORT_JOB_RUN)
    return job


def import_job_run(*, job_id: int) -> ImportJob | None:
    """Run a queued upload's import and record the outcome on its row.

    Safe to run twice (a redelivered task after a worker died): a finished job is left
    alone, and a half-done one starts over because its transaction was rolled back.
    """
    job = jobs.claim(ImportJob, job_id)
    if job is None:
        return ImportJob.objects.filter(pk=job_id).first()
    upload = Path(job.upload_path)
    progress = ProgressFile(upload.parent / "progress.json")
    try:
        path = upload_source_path(upload, upload.parent / "unpacked", job.fmt)
        result = benchmark_import(
            path=path,
            name=job.name,
            fmt=job.fmt,
            split=job.split,
            replace=job.replace,
            progress=progress,
            created_by=job.created_by,
        )
    except (ImportRejected, BeirFormatError) as exc:
        jobs.fail(job, str(exc))
    except Exception as exc:
        logger.exception("import job %s failed", job_id)
        jobs.fail(job, f"unexpected error: {exc!r}")
    else:
        jobs.finish(
            job,
            ImportStatus.DONE if result.changed else ImportStatus.UNCHANGED,
            running_only=False,
            message=result.describe(job.name),
            benchmark_id=result.benchmark_id,
            documents=result.documents,
            queries=result.queries,
            qrels=result.qrels,
        )
    finally:
        shutil.rmtree(upload.parent, ignore_errors=True)
    job.refresh_from_db()
    return job


WORKER_LOST = jobs.WORKER_LOST


@jobs.lost(ImportJob)
def _import_job_lost(job: ImportJob) -> None:
    """An import marked running whose task no live worker holds lost its worker: killed,
    or its machine gone, mid-import (recovered by jobs.recover at worker start).

    The import is one transaction, rolled back with its worker, so the job is run again
    from its upload, once. One that already lost a worker (it may be what kills them) or
    whose upload is gone fails, saying so, and its upload folder is removed.
    """
    upload = Path(job.upload_path)
    if upload.is_file() and not job.message.startswith(WORKER_LOST):
        message = f"{WORKER_LOST}: its worker died mid-import; running it again"
        rows = ImportJob.objects.filter(pk=job.pk, status=ImportStatus.RUNNING)
        if rows.update(status=ImportStatus.QUEUED, message=message):
            jobs.send_now(job, lambda: queues.enqueue(queues.IMPORT_JOB_RUN, job.pk))
        logger.warning("import job %s lost its worker: re-queued", job.pk)
        return
    why = "its worker died mid-import again" if upload.is_file() else "its upload is gone"
    jobs.fail(job, f"{WORKER_LOST}: {why}")
    shutil.rmtree(upload.parent, ignore_errors=True)


class ProgressFile:
    """An import's live progress as a small JSON file beside the upload.

    Written at most twice a second, atomically (write, then rename), so the page that
    polls it never reads half a file.
    """

    def __init__(self, path: Path, *, interval: float = 0.5) -> None:
        self.path = path
        self.interval = interval
        self._last = 0.0

    def __call__(self, state: ImportProgress) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        body = {
            "phase": state.phase,
            "documents": state.documents,
            "total_documents": state.total_documents,
            "rate": round(state.rate),
        }
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(body))
        os.replace(partial, self.path)
