"""Permission and validation cases for imports, agreement and bulk undo."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from harness_app.models import ImportJob
from harness_app.services.import_jobs import import_job_create
from tests import factories
from trajectories.models import Annotation, AnnotationBulkAction
from trajectories.services.annotations import annotation_bulk_apply

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(researcher) -> ImportJob:
    """A queued upload (the test transaction never commits, so no worker picks it up)."""
    upload = SimpleUploadedFile("questions.json", b"[]", content_type="application/json")
    return import_job_create(
        upload=upload, name="uploaded", split="dev", replace=False, created_by=researcher
    )


@pytest.fixture
def norole_api():
    return factories.client_for(factories.user("nobody", None))


# --- /api/imports/ ------------------------------------------------------------------------


def test_an_annotator_follows_an_import(annotator_api, job):
    listed = annotator_api.get("/api/imports/")
    assert listed.status_code == 200
    assert [(j["id"], j["name"], j["status"]) for j in listed.json()["results"]] == [
        (job.pk, "uploaded", "queued")
    ]
    one = annotator_api.get(f"/api/imports/{job.pk}/")
    assert one.status_code == 200
    assert (one.json()["fmt"], one.json()["split"]) == ("hotpotqa", "dev")


@pytest.mark.parametrize("path", ["/api/imports/", "/api/imports/{pk}/"])
def test_a_user_without_a_role_cannot_see_imports(norole_api, job, path):
    response = norole_api.get(path.format(pk=job.pk))
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the researcher or annotator role"}


def test_an_unknown_import_is_404(annotator_api, job):
    response = annotator_api.get(f"/api/imports/{job.pk + 1000}/")
    assert response.status_code == 404
    assert "No ImportJob matches" in response.json()["detail"]


# --- /api/annotations/agreement/ ----------------------------------------------------------


def test_agreement_is_for_researchers_in_the_api(annotator_api):
    # The /annotate/agreement/ page shows the same figures to annotators (docs/api.md).
    response = annotator_api.get("/api/annotations/agreement/")
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the researcher role"}


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"reward_min": "high"}, "reward_min", "expected a number, got 'high'"),
        ({"format_errors_max": "none"}, "format_errors_max", "expected a number, got 'none'"),
        (
            {"batch": "latest"},
            "batch",
            "expected a positive whole-number id below 2^63, got 'latest'",
        ),
        ({"status": "done"}, "status", "'done' is not one of pending, running, completed"),
        ({"reward_min": "0.9", "reward_max": "0.1"}, "reward_min", "is above reward_max"),
        ({"colour": "red"}, "colour", "unknown filter; use one of batch, benchmark"),
    ],
)
def test_a_bad_agreement_filter_is_400_naming_it(researcher_api, params, field, message):
    response = researcher_api.get("/api/annotations/agreement/", params)
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert message in response.json()[field][0]


# --- /api/annotations/bulk/{id}/undo/ -----------------------------------------------------


def test_an_annotator_cannot_undo_a_bulk_action(
    annotator_api, researcher, demo_benchmark, baseline_policy
):
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    bulk = annotation_bulk_apply(actor=researcher, filters={"batch": batch.pk}, label="approve")

    response = annotator_api.post(f"/api/annotations/bulk/{bulk.pk}/undo/")
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the researcher role"}
    bulk.refresh_from_db()
    assert bulk.undone_at is None
    assert Annotation.objects.filter(annotator=researcher, label="approve").count() == 2


def test_undoing_an_unknown_bulk_action_is_404(researcher_api):
    response = researcher_api.post("/api/annotations/bulk/4242/undo/")
    assert response.status_code == 404
    assert not AnnotationBulkAction.objects.exists()
