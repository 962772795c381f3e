"""SFT exports over the API: create (researchers), poll, download."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from training.models import SFTExport
from training.services.exports import sft_export_create, sft_export_run

pytestmark = pytest.mark.django_db


def _create(client, body, capture):
    with capture(execute=False) as callbacks:
        response = client.post("/api/exports/", body, format="json")
    return response, callbacks


def test_export_is_created_polled_and_downloaded(
    researcher_api, approved, django_capture_on_commit_callbacks
):
    response, callbacks = _create(
        researcher_api, {"filters": {"batch": approved.pk}}, django_capture_on_commit_callbacks
    )
    assert response.status_code == 202, response.json()
    export_id = response.json()["id"]
    assert response.json()["status"] == "queued" and len(callbacks) == 1
    early = researcher_api.get(f"/api/exports/{export_id}/download/")
    assert early.status_code == 409 and "is queued" in early.json()["detail"]
    sft_export_run(export_id=export_id)  # what the worker does with the queued task
    status = researcher_api.get(f"/api/exports/{export_id}/").json()
    assert (status["status"], status["episodes"]) == ("done", 2)
    assert status["filters"] == {"batch": approved.pk, "annotation_status": "approved"}
    download = researcher_api.get(status["download"])
    body = b"".join(download.streaming_content)
    assert download["Content-Type"] == "application/jsonl"
    assert hashlib.sha256(body).hexdigest() == status["manifest"]["sha256"]
    assert len(body.splitlines()) == status["records"]


def test_annotators_read_exports_but_cannot_create_them(
    annotator_api, approved, django_capture_on_commit_callbacks
):
    response, _ = _create(annotator_api, {}, django_capture_on_commit_callbacks)
    assert response.status_code == 403
    assert not SFTExport.objects.exists()
    assert annotator_api.get("/api/exports/").status_code == 200


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"format": "csv"}, "format", '"csv" is not a valid choice.'),
        ({"filters": {"reward_min": "a lot"}}, "filters", "expected a number, got 'a lot'"),
        ({"filters": "approved"}, "filters", 'Expected a dictionary of items but got type "str".'),
    ],
)
def test_bad_export_requests_say_what_is_wrong(
    researcher_api, body, field, message, django_capture_on_commit_callbacks
):
    response, _ = _create(researcher_api, body, django_capture_on_commit_callbacks)
    assert response.status_code == 400
    assert message in response.json()[field][0]


def test_export_list_query_count_does_not_grow(
    researcher_api, researcher, django_assert_num_queries
):
    SFTExport.objects.create(created_by=researcher)
    with django_assert_num_queries(4):  # token, roles, count, page with creators
        researcher_api.get("/api/exports/")
    SFTExport.objects.bulk_create(SFTExport(created_by=researcher) for _ in range(5))
    with django_assert_num_queries(4):
        assert researcher_api.get("/api/exports/").json()["count"] == 6


def test_a_missing_file_is_404_not_a_crash(researcher_api, approved):
    export = sft_export_run(export_id=sft_export_create(enqueue=False).pk)
    Path(export.file_path).unlink()
    response = researcher_api.get(f"/api/exports/{export.pk}/download/")
    assert response.status_code == 404 and "file is missing" in response.json()["detail"]


def test_an_export_of_zero_episodes_is_refused_saying_which_filter_emptied_it(
    researcher_api, ran_batch, django_capture_on_commit_callbacks
):
    response, callbacks = _create(
        researcher_api, {"filters": {"batch": ran_batch.pk}}, django_capture_on_commit_callbacks
    )
    assert response.status_code == 400
    assert response.json()["filters"] == [
        f"0 episodes: 4 episodes match batch={ran_batch.pk}, but none of them matches "
        "annotation_status=approved (approved only: the default without an annotation status)"
    ]
    assert not SFTExport.objects.exists() and not callbacks
