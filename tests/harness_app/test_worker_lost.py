"""An import whose worker dies mid-way (SIGKILL, a lost machine) does not stay `running`:
the next worker to start runs it again, once, or fails it, and its upload is removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app import jobs, queues
from harness_app.models import ImportJob, ImportStatus
from harness_app.services.import_jobs import import_job_create
from tests.harness_app.conftest import HOTPOT
from tests.workers import start_worker, wait_until


def _status(job: ImportJob) -> str:
    return ImportJob.objects.get(pk=job.pk).status


@pytest.mark.django_db(transaction=True)
def test_an_import_whose_worker_is_killed_is_run_again_and_its_upload_removed(
    tmp_path: Path,
) -> None:
    # Its imports pause for a minute once running: it dies well inside that pause.
    doomed = start_worker(
        tmp_path, queues=queues.INDEX, name="doomed", app="tests.fakes.slow_import_worker"
    )
    try:
        upload = SimpleUploadedFile("hotpot.json", json.dumps(HOTPOT).encode())
        job = import_job_create(
            upload=upload, name="hp", split="dev", replace=False, created_by=None
        )
        folder = Path(job.upload_path).parent
        wait_until(
            lambda: _status(job) == ImportStatus.RUNNING,
            timeout=60,
            what=f"the import to start\n{doomed.log()[-3000:]}",
        )
        # The live worker says it holds the import, so a worker starting now leaves it be.
        queues.consumers_forget()
        assert (queues.IMPORT_JOB_RUN, (job.pk,)) in queues.tasks_in_hand(timeout=1)
        assert jobs.recover(in_hand=queues.tasks_in_hand())["harness_app.ImportJob"] == 0
    finally:
        doomed.kill()  # SIGKILL, main process and pool: nothing runs its finally blocks
    assert _status(job) == ImportStatus.RUNNING and folder.is_dir()

    survivor = start_worker(tmp_path, queues=queues.INDEX, name="survivor")
    try:
        wait_until(
            lambda: _status(job) not in (ImportStatus.QUEUED, ImportStatus.RUNNING),
            timeout=240,
            what=f"the import to be run again\n{survivor.log()[-3000:]}",
        )
    finally:
        survivor.stop()
    job.refresh_from_db()
    assert job.status == ImportStatus.DONE, job.message
    assert (job.documents, job.queries) == (6, 3)
    assert not folder.exists()
    assert "lost its worker: re-queued" in survivor.log()


def _running_job(tmp_path: Path, *, message: str = "") -> ImportJob:
    folder = tmp_path / "uploads" / "a1"
    folder.mkdir(parents=True)
    (folder / "upload.json").write_text("[]")
    return ImportJob.objects.create(
        name="x",
        fmt="hotpotqa",
        upload_path=str(folder / "upload.json"),
        status=ImportStatus.RUNNING,
        message=message,
    )


@pytest.mark.django_db
def test_an_import_that_lost_its_worker_twice_fails_with_the_reason(tmp_path: Path) -> None:
    job = _running_job(
        tmp_path, message="worker_lost: its worker died mid-import; running it again"
    )
    assert jobs.recover(in_hand=frozenset())["harness_app.ImportJob"] == 1
    job.refresh_from_db()
    assert job.status == ImportStatus.FAILED
    assert job.message == "worker_lost: its worker died mid-import again"
    assert job.finished_at is not None
    assert not Path(job.upload_path).parent.exists()


@pytest.mark.django_db
def test_an_import_a_live_worker_holds_is_left_alone(tmp_path: Path) -> None:
    job = _running_job(tmp_path)
    assert jobs.recover(in_hand={(queues.IMPORT_JOB_RUN, (job.pk,))})["harness_app.ImportJob"] == 0
    job.refresh_from_db()
    assert job.status == ImportStatus.RUNNING and Path(job.upload_path).is_file()
