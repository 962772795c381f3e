"""End to end with a real Celery worker process: import → queued build → index ready."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.models import Corpus, ImportJob, ImportStatus, IndexStatus
from harness_app.services.benchmarks import benchmark_import
from tests.workers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _index_status(corpus_id: int) -> str:
    return Corpus.objects.get(pk=corpus_id).index_status


def test_an_import_queues_the_index_build_and_the_worker_marks_it_ready(
    live_worker, beir_folder: Path
) -> None:
    result = benchmark_import(path=beir_folder, name="orchard", fmt="beir")

    wait_until(
        lambda: _index_status(result.corpus_id) == IndexStatus.READY,
        timeout=90,
        what=f"the worker to build the index\n{live_worker.log()[-3000:]}",
    )
    corpus = Corpus.objects.get(pk=result.corpus_id)
    assert corpus.index_error == "" and Path(corpus.index_path, "manifest.json").is_file()
    assert "corpus_index_build" in live_worker.log()


def test_an_uploaded_zip_is_imported_and_indexed_by_the_worker(
    live_worker, researcher_client, beir_folder: Path
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path in beir_folder.rglob("*"):
            if path.is_file():
                bundle.write(path, path.relative_to(beir_folder).as_posix())
    upload = SimpleUploadedFile("orchard.zip", buffer.getvalue())

    researcher_client.post(
        "/benchmarks/upload/", {"file": upload, "name": "uploaded", "split": "test"}
    )

    job = ImportJob.objects.get(name="uploaded")
    wait_until(
        lambda: (
            ImportJob.objects.get(pk=job.pk).status
            not in (ImportStatus.QUEUED, ImportStatus.RUNNING)
        ),
        timeout=90,
        what=f"the worker to run the import\n{live_worker.log()[-3000:]}",
    )
    job.refresh_from_db()
    assert job.status == ImportStatus.DONE, job.message
    wait_until(
        lambda: _index_status(job.benchmark.corpus_id) == IndexStatus.READY,
        timeout=90,
        what="the index build queued by the import",
    )
    page = researcher_client.get("/benchmarks/").content.decode()
    assert "uploaded" in page and "status-ok" in page
