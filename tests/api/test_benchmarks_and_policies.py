"""Benchmarks (list, upload for import) and policy configs (list, create)."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.models import ImportJob, PolicyConfig
from tests.fakes.openai_server import FakeOpenAIServer
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
    expected = "upload a .zip (a benchmark folder), a .json or a .jsonl file"
    assert response.json() == {"file": [expected]}


def test_annotators_cannot_upload(annotator_api):
    response = annotator_api.post(
        "/api/benchmarks/import/", {"file": _demo_zip(), "name": "x"}, format="multipart"
    )
    assert response.status_code == 403
    assert not ImportJob.objects.exists()


def test_researcher_creates_a_policy_config(researcher_api):
    with FakeOpenAIServer(model="Qwen3-0.6B") as served:  # saving asks for its models
        body = {
            "name": "qwen",
            "kind": "openai",
            "base_url": served.base_url,
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


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",  # the cloud metadata address
        "http://internal-db.example:5432/v1",
        "file:///etc/passwd",
    ],
)
def test_a_policy_may_not_point_outside_the_allowed_hosts(researcher_api, url):
    body = {"name": "x", "kind": "openai", "model": "m", "base_url": url}
    response = researcher_api.post("/api/policies/", body, format="json")
    assert response.status_code == 400
    messages = " ".join(response.json()["base_url"])
    assert "POLICY_ALLOWED_HOSTS" in messages or "not an http(s) URL" in messages
    assert not PolicyConfig.objects.filter(name="x").exists()


def test_allowed_hosts_can_name_a_port(researcher_api, settings):
    settings.POLICY_ALLOWED_HOSTS = ["vllm.lab:8000"]
    body = {"name": "ok", "kind": "openai", "model": "m", "base_url": "http://vllm.lab:8000/v1"}
    assert researcher_api.post("/api/policies/", body, format="json").status_code == 201
    other_port = {**body, "name": "no", "base_url": "http://vllm.lab:9000/v1"}
    refused = researcher_api.post("/api/policies/", other_port, format="json")
    assert refused.status_code == 400
    assert "host 'vllm.lab' is not one policies may call" in refused.json()["base_url"][0]


def test_a_stored_policy_whose_host_is_no_longer_allowed_is_refused_at_use(settings):
    from harness_app.policy_hosts import PolicyHostError, policy_base_url

    # Written before the setting narrowed (the ORM's create runs no validators).
    config = PolicyConfig.objects.create(
        name="old", kind="openai", model="m", base_url="http://10.0.0.7:8000/v1"
    )
    with pytest.raises(PolicyHostError, match=f"policy config {config.pk}: host '10.0.0.7'"):
        policy_base_url(config)
    settings.POLICY_ALLOWED_HOSTS = ["*"]
    assert policy_base_url(config) == "http://10.0.0.7:8000/v1"
