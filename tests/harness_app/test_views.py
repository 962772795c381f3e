"""Benchmark pages: what browsing users see, pinned query counts, and researcher-only upload."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.importers.records import ImportProgress
from harness_app.models import Benchmark, Corpus, ImportJob, ImportStatus
from harness_app.services.benchmarks import benchmark_import
from harness_app.services.import_jobs import ProgressFile, import_job_run
from tests.harness_app.conftest import QRELS, row_counts, write_beir

pytestmark = pytest.mark.django_db

# session, user, and the user's groups (roles): the cost of any logged-in page
LOGIN_QUERIES = 3


def _zip_of(folder: Path, prefix: str = "orchard/") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path in folder.rglob("*"):
            if path.is_file():
                bundle.write(path, prefix + path.relative_to(folder).as_posix())
    return buffer.getvalue()


def _many_benchmarks(count: int) -> None:
    corpus = Corpus.objects.create(name="shared", content_hash="0" * 64, doc_count=0)
    Benchmark.objects.bulk_create(
        Benchmark(name=f"b{i:03}", corpus=corpus, source="beir", content_hash=str(i))
        for i in range(count)
    )


def test_list_shows_each_benchmark_with_counts_and_index_status(
    researcher_client, existing
) -> None:
    page = researcher_client.get("/benchmarks/").content.decode()

    assert f'href="/benchmarks/{existing.pk}/"' in page
    assert '<td class="num">54</td>' in page and '<td class="num">12</td>' in page
    assert '<td class="num">25</td>' in page
    assert "queued" in page  # the index build waits for a worker


@pytest.mark.parametrize("count", [1, 25])
def test_list_costs_the_same_queries_for_1_or_25_benchmarks(
    researcher_client, django_assert_num_queries, count: int
) -> None:
    _many_benchmarks(count)
    with django_assert_num_queries(LOGIN_QUERIES + 3):  # count, page with counts, imports
        response = researcher_client.get("/benchmarks/")
    assert response.content.decode().count('href="/benchmarks/') >= count


def test_list_is_paginated(researcher_client) -> None:
    _many_benchmarks(30)
    first = researcher_client.get("/benchmarks/").content.decode()
    second = researcher_client.get("/benchmarks/?page=2").content.decode()

    assert "b024" in first and "b025" not in first and "Page 1 of 2" in first
    assert "b025" in second and "b029" in second


def test_names_and_texts_are_escaped(researcher_client, tmp_path: Path) -> None:
    folder = write_beir(
        tmp_path / "x",
        corpus=[{"_id": "d", "title": "<b>bold</b>", "text": "<script>alert(1)</script>"}],
        queries=[
            {"_id": "q", "text": "<img src=x onerror=alert(1)>", "metadata": {"answer": "<i>"}}
        ],
        qrels=[("q", "d", 2)],
    )
    result = benchmark_import(path=folder, name="<script>name</script>", fmt="beir")

    listing = researcher_client.get("/benchmarks/").content.decode()
    detail = researcher_client.get(f"/benchmarks/{result.benchmark_id}/").content.decode()

    assert "<script>name</script>" not in listing and "&lt;script&gt;name&lt;/script&gt;" in listing
    assert (
        "<script>alert(1)</script>" not in detail
        and "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    )
    assert "<img src=x" not in detail and "&lt;i&gt;" in detail


def test_detail_shows_queries_with_answers_and_judged_documents(annotator_client, existing) -> None:
    page = annotator_client.get(f"/benchmarks/{existing.pk}/").content.decode()

    assert "Which river flows through the home town of the inventor of the Vell lamp?" in page
    assert "Vire River" in page
    assert '<span class="mono" title="Tamsbury">Tamsbury</span> (2)' in page
    assert "Port Halvard is a harbour town" in page  # the first document


def test_detail_pages_through_queries_at_a_fixed_query_count(
    researcher_client, tmp_path: Path, django_assert_num_queries
) -> None:
    queries = [{"_id": f"q{i}", "text": f"Question {i}?"} for i in range(45)]
    folder = write_beir(
        tmp_path / "many",
        queries=[*queries, {"_id": "q1x", "text": "x"}],
        qrels=[("q0", "alder", 2), ("q44", "teal", 1)],
    )
    result = benchmark_import(path=folder, name="many", fmt="beir")
    url = f"/benchmarks/{result.benchmark_id}/"

    # benchmark with counts, query count, page of queries, their qrels, sample documents
    with django_assert_num_queries(LOGIN_QUERIES + 5):
        first = researcher_client.get(url).content.decode()
    last = researcher_client.get(url + "?page=3").content.decode()

    assert "Question 0?" in first and "Question 20?" not in first and "Page 1 of 3" in first
    assert "Question 44?" in last and "teal</span> (1)" in last


def test_an_unknown_benchmark_is_404(researcher_client) -> None:
    assert researcher_client.get("/benchmarks/999999/").status_code == 404


def test_annotators_may_not_upload(annotator_client, beir_folder: Path) -> None:
    upload = SimpleUploadedFile("orchard.zip", _zip_of(beir_folder))

    assert annotator_client.get("/benchmarks/upload/").status_code == 403
    response = annotator_client.post(
        "/benchmarks/upload/", {"file": upload, "name": "x", "split": "test"}
    )

    assert response.status_code == 403
    assert "researcher role" in response.content.decode()
    assert not ImportJob.objects.exists()


def test_annotators_see_no_upload_link(annotator_client) -> None:
    assert "Upload a benchmark" not in annotator_client.get("/benchmarks/").content.decode()


def test_upload_saves_the_file_and_queues_the_import(
    researcher_client,
    beir_folder: Path,
    data_dir: Path,
    django_capture_on_commit_callbacks,
    monkeypatch,
) -> None:
    queued: list = []
    monkeypatch.setattr(
        "harness_app.tasks.import_job_run.apply_async",
        lambda args, queue: queued.append((args, queue)),
    )
    upload = SimpleUploadedFile("orchard.zip", _zip_of(beir_folder))

    with django_capture_on_commit_callbacks(execute=True):
        response = researcher_client.post(
            "/benchmarks/upload/", {"file": upload, "name": "orchard", "split": "test"}, follow=True
        )

    job = ImportJob.objects.get()
    assert (job.name, job.fmt, job.status, job.created_by.username) == (
        "orchard",
        "beir",
        "queued",
        "rita",
    )
    assert Path(job.upload_path).is_file() and data_dir / "uploads" in Path(job.upload_path).parents
    assert queued == [((job.pk,), "index")]
    page = response.content.decode()
    assert "importing &#x27;orchard&#x27; in the background" in page
    assert f'hx-get="/benchmarks/imports/{job.pk}/" hx-trigger="every 1s"' in page


def test_upload_refuses_other_file_types(researcher_client) -> None:
    upload = SimpleUploadedFile("orchard.tar.gz", b"...")

    response = researcher_client.post(
        "/benchmarks/upload/", {"file": upload, "name": "o", "split": "test"}
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "Upload a .zip (a benchmark folder), a .json or a .jsonl file." in page
    assert not ImportJob.objects.exists()


def test_upload_refuses_a_split_that_names_a_path(researcher_client, beir_folder: Path) -> None:
    upload = SimpleUploadedFile("orchard.zip", _zip_of(beir_folder))

    response = researcher_client.post(
        "/benchmarks/upload/", {"file": upload, "name": "o", "split": "../etc"}
    )

    assert "Use letters, digits" in response.content.decode()
    assert not ImportJob.objects.exists()


def _queued_job(researcher_client, data_dir: Path, content: bytes, filename: str) -> ImportJob:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("harness_app.tasks.import_job_run.apply_async", lambda *a, **k: None)
        researcher_client.post(
            "/benchmarks/upload/",
            {"file": SimpleUploadedFile(filename, content), "name": "orchard", "split": "test"},
        )
    return ImportJob.objects.get()


def test_a_running_import_shows_live_progress_and_keeps_polling(
    researcher_client, beir_folder, data_dir
) -> None:
    job = _queued_job(researcher_client, data_dir, _zip_of(beir_folder), "orchard.zip")
    ImportJob.objects.filter(pk=job.pk).update(status=ImportStatus.RUNNING)
    progress = ProgressFile(Path(job.upload_path).parent / "progress.json", interval=0)
    progress(ImportProgress(phase="writing", documents=500, total_documents=1000))

    row = researcher_client.get(f"/benchmarks/imports/{job.pk}/").content.decode()

    assert "writing: 500 / 1000 documents (50%)" in row
    assert 'hx-trigger="every 1s"' in row


def test_a_finished_import_stops_polling_and_links_the_benchmark(
    researcher_client, beir_folder, data_dir
) -> None:
    job = _queued_job(researcher_client, data_dir, _zip_of(beir_folder), "orchard.zip")

    import_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert job.status == ImportStatus.DONE and (job.documents, job.queries, job.qrels) == (6, 3, 5)
    assert not Path(job.upload_path).parent.exists()  # the upload is cleaned up
    row = researcher_client.get(f"/benchmarks/imports/{job.pk}/").content.decode()
    assert "hx-trigger" not in row
    assert f'href="/benchmarks/{job.benchmark_id}/"' in row and "Imported benchmark" in row


def test_a_failed_import_says_why_and_writes_nothing(researcher_client, tmp_path, data_dir) -> None:
    broken = write_beir(tmp_path / "broken", qrels=[*QRELS, ("q1", "ghost", 1)])
    job = _queued_job(researcher_client, data_dir, _zip_of(broken), "broken.zip")
    before = row_counts()

    import_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert job.status == ImportStatus.FAILED
    assert "qrels/test.tsv, line 7, field 'corpus-id': unknown document 'ghost'" in job.message
    assert row_counts() == before
    assert "unknown document" in researcher_client.get("/benchmarks/").content.decode()


def test_a_hotpotqa_upload_imports(researcher_client, hotpot_file: Path, data_dir) -> None:
    job = _queued_job(researcher_client, data_dir, hotpot_file.read_bytes(), "hotpot_dev.json")

    import_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert (job.fmt, job.status, job.documents) == ("hotpotqa", ImportStatus.DONE, 6)


def test_a_zip_without_a_corpus_is_refused(researcher_client, tmp_path, data_dir) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("../../evil.txt", "no")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("harness_app.tasks.import_job_run.apply_async", lambda *a, **k: None)
        response = researcher_client.post(
            "/benchmarks/upload/",
            {"file": SimpleUploadedFile("evil.zip", buffer.getvalue()), "name": "o", "split": "t"},
        )

    assert "evil.zip: the zip holds no corpus.jsonl" in response.content.decode()
    assert not ImportJob.objects.exists()  # refused on arrival, before any job
    assert not (data_dir.parent / "evil.txt").exists()


def test_the_dashboard_links_the_benchmarks(researcher_client) -> None:
    page = researcher_client.get("/").content.decode()
    assert 'href="/benchmarks/"' in page and 'href="/benchmarks/upload/"' in page


def test_detail_leads_to_its_episodes_and_to_a_launch(researcher_client, existing) -> None:
    page = researcher_client.get(f"/benchmarks/{existing.pk}/").content.decode()
    assert f'href="/batches/new/?benchmark={existing.pk}">Launch a batch</a>' in page
    assert f'href="/episodes/?benchmark={existing.pk}">Episodes on this benchmark</a>' in page


def test_an_annotator_sees_the_episodes_link_but_no_launch(annotator_client, existing) -> None:
    page = annotator_client.get(f"/benchmarks/{existing.pk}/").content.decode()
    assert "Launch a batch" not in page and f"/episodes/?benchmark={existing.pk}" in page
