"""Uploading MuSiQue, 2WikiMultihopQA, BrowseComp-Plus and FRAMES benchmarks, on the page and
through the API: the format detected or chosen, the worker's import, and refusals."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.models import ImportJob, ImportStatus
from harness_app.services.import_jobs import import_job_run
from tests.harness_app.conftest import row_counts
from tests.harness_app.test_import_formats import BROWSECOMP, FRAMES, MUSIQUE, TWOWIKI

pytestmark = pytest.mark.django_db


def _zip_of(folder: Path, prefix: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                bundle.write(path, prefix + path.relative_to(folder).as_posix())
    return buffer.getvalue()


def _post(client, content: bytes, filename: str, **fields: str):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("harness_app.tasks.import_job_run.apply_async", lambda *a, **k: None)
        data = {"file": SimpleUploadedFile(filename, content), "name": "up", "split": "test"}
        return client.post("/benchmarks/upload/", data | fields)


UPLOADS = {
    "musique": (lambda: MUSIQUE.read_bytes(), "musique_full.jsonl", (6, 2, 5)),
    "2wikimultihopqa": (lambda: TWOWIKI.read_bytes(), "dev.json", (3, 3, 6)),
    "browsecomp-plus": (lambda: _zip_of(BROWSECOMP, "bcp/"), "bcp.zip", (5, 2, 4)),
    "frames": (lambda: _zip_of(FRAMES, "frames-data/"), "frames.zip", (4, 2, 4)),
}


@pytest.mark.parametrize("fmt", UPLOADS)
def test_an_upload_is_detected_and_imported(researcher_client, data_dir, fmt: str) -> None:
    content, filename, counts = UPLOADS[fmt]
    _post(researcher_client, content(), filename)
    job = ImportJob.objects.get()
    assert job.fmt == fmt  # detected when the file was received

    import_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert job.status == ImportStatus.DONE, job.message
    assert (job.documents, job.queries, job.qrels) == counts
    assert job.benchmark is not None and job.benchmark.source == fmt
    assert not Path(job.upload_path).parent.exists()


def test_the_page_offers_the_formats(researcher_client) -> None:
    page = researcher_client.get("/benchmarks/upload/").content.decode()

    assert '<option value="auto" selected>Detect from the file</option>' in page
    for value in ("beir", "hotpotqa", "musique", "2wikimultihopqa", "browsecomp-plus", "frames"):
        assert f'<option value="{value}"' in page


def test_a_chosen_format_that_does_not_fit_the_file_is_refused(researcher_client, data_dir) -> None:
    response = _post(researcher_client, MUSIQUE.read_bytes(), "m.jsonl", format="beir")

    assert "a .jsonl upload is read as musique, 2wikimultihopqa, not beir" in (
        response.content.decode()
    )
    assert not ImportJob.objects.exists()
    assert not any((data_dir / "uploads").iterdir())  # the saved file is not kept


def test_a_jsonl_of_no_known_format_is_refused_by_name(researcher_client, data_dir) -> None:
    response = _post(researcher_client, b'{"_id": "x", "text": "y"}\n', "mine.jsonl")

    page = response.content.decode()
    assert "mine.jsonl: can&#x27;t tell the benchmark format from its first record" in page
    assert not ImportJob.objects.exists()


def test_a_chosen_format_is_used_as_is(researcher_client, data_dir, tmp_path: Path) -> None:
    # a 2Wiki file without `evidences` would be detected as HotpotQA
    records = json.loads(TWOWIKI.read_text(encoding="utf-8"))
    for record in records:
        del record["evidences"]
    content = json.dumps(records).encode()
    _post(researcher_client, content, "dev.json", format="2wikimultihopqa")
    job = ImportJob.objects.get()

    import_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert (job.fmt, job.status, job.qrels) == ("2wikimultihopqa", ImportStatus.DONE, 6)


def test_a_bad_frames_zip_fails_naming_the_link_and_writes_nothing(
    researcher_client, data_dir, tmp_path: Path
) -> None:
    folder = shutil.copytree(FRAMES, tmp_path / "frames")
    pages = (folder / "pages.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "pages.jsonl").write_text("\n".join(pages[:2] + pages[3:]) + "\n")
    _post(researcher_client, _zip_of(folder, ""), "frames.zip")
    job = ImportJob.objects.get()
    before = row_counts()

    import_job_run(job_id=job.pk)

    job.refresh_from_db()
    assert job.status == ImportStatus.FAILED
    assert (
        "test.tsv, line 3, field 'wiki_links[1]': no page in pages.jsonl for "
        "'https://en.m.wikipedia.org/wiki/Bramwick%20Bridge'" in job.message
    )
    assert row_counts() == before


def test_the_api_takes_a_format(researcher_api, data_dir, django_capture_on_commit_callbacks):
    upload = SimpleUploadedFile("two.json", TWOWIKI.read_bytes())

    with django_capture_on_commit_callbacks():
        response = researcher_api.post(
            "/api/benchmarks/import/",
            {"file": upload, "name": "two", "format": "2wikimultihopqa"},
            format="multipart",
        )

    assert response.status_code == 202, response.json()
    assert response.json()["fmt"] == "2wikimultihopqa"


def test_the_api_refuses_an_unknown_format(researcher_api, data_dir) -> None:
    upload = SimpleUploadedFile("two.json", TWOWIKI.read_bytes())

    response = researcher_api.post(
        "/api/benchmarks/import/",
        {"file": upload, "name": "two", "format": "trec"},
        format="multipart",
    )

    assert response.status_code == 400
    assert response.json() == {"format": ['"trec" is not a valid choice.']}
    assert not ImportJob.objects.exists()


def test_the_api_says_why_a_file_was_refused(researcher_api, data_dir) -> None:
    upload = SimpleUploadedFile("q.jsonl", b'{"question": "q"}\n')

    response = researcher_api.post(
        "/api/benchmarks/import/", {"file": upload, "name": "q"}, format="multipart"
    )

    assert response.status_code == 400
    assert "q.jsonl: can't tell the benchmark format" in response.json()["file"][0]
