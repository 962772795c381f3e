"""Benchmarks (list, upload for import) and policy configs (list, create)."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.models import ImportJob, PolicyConfig
from tests.paths import DEMO_DIR

pytestmark = pytest.mark.django_db


def test_benchmark_list_has_counts(researcher_api, demo_benchmark, django_assert_num_queries):
    with django_assert_num_queries(4):  # token, roles, count, page
        response = researcher_api.get("/api/benchmarks/")
    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert (row["name"], row["queries"]) == ("demo", demo_benchmark.queries.count())
    assert row["documents"] == demo_benchmark.corpus.doc_count


def _demo_zip() -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path in DEMO_DIR.rglob("*"):
            if path.is_file():
                bundle.write(path, path.relative_to(DEMO_DIR).as_posix())
    return SimpleUploadedFile("demo.zip", buffer.getvalue(), content_type="application/zip")


def test_upload_queues_an_import_job(researcher_api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = researcher_api.post(
            "/api/benchmarks/import/",
            {"file": _demo_zip(), "name": "uploaded", "split": "test"},
            format="multipart",
        )
    assert response.status_code == 202, response.json()
    job = ImportJob.objects.get(pk=response.json()["id"])
    assert (job.name, job.status) == ("uploaded", "queued")
    assert len(callbacks) == 1  # sent to a worker once committed
    status = researcher_api.get(f"/api/imports/{job.pk}/").json()
    assert status["status"] == "queued"


def test_upload_of_the_wrong_kind_of_file_says_what_to_send(researcher_api):
    upload = SimpleUploadedFile("corpus.csv", b"a,b\n")
    response = researcher_api.post(
        "/api/benchmarks/import/", {"file": upload, "name": "x"}, format="multipart"
    )
    assert response.status_code == 400
    assert response.json() == {"file": ["upload a .zip (BEIR folder) or a .json (HotpotQA) file"]}


def test_annotators_cannot_upload(annotator_api):
    response = annotator_api.post(
        "/api/benchmarks/import/", {"file": _demo_zip(), "name": "x"}, format="multipart"
    )
    assert response.status_code == 403
    assert not ImportJob.objects.exists()


def test_researcher_creates_a_policy_config(researcher_api):
    body = {
        "name": "qwen",
        "kind": "openai",
        "base_url": "http://127.0.0.1:8011/v1",
        "model": "Qwen3-0.6B",
        "sampling": {"temperature": 0.7, "max_tokens": 256},
    }
    response = researcher_api.post("/api/policies/", body, format="json")
    assert response.status_code == 201, response.json()
    assert PolicyConfig.objects.get(name="qwen").sampling == body["sampling"]
    names = [p["name"] for p in researcher_api.get("/api/policies/").json()["results"]]
    assert "qwen" in names


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"name": "x", "kind": "openai"}, "model", "an OpenAI-compatible policy needs one"),
        ({"name": "x", "kind": "psychic"}, "kind", '"psychic" is not a valid choice.'),
        (
            {"name": "x", "kind": "baseline", "system_prompt_version": "v9"},
            "system_prompt_version",
            "unknown version; use v1",
        ),
        (
            {"name": "x", "kind": "baseline", "sampling": {"temperature": "hot"}},
            "sampling",
            "temperature must be a number, got 'hot'",
        ),
        (
            {"name": "x", "kind": "baseline", "sampling": {"temprature": 1}},
            "sampling",
            "unknown setting 'temprature'; use temperature, top_p, max_tokens, seed",
        ),
    ],
)
def test_bad_policy_configs_name_the_field(researcher_api, body, field, message):
    response = researcher_api.post("/api/policies/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert errors[field] == [message]
