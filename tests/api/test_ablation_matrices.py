"""Ablation matrices over the API: researchers create them (the service's checks as 400s
naming the field), everyone with a role lists and reads them, the result included."""

from __future__ import annotations

import pytest

from harness_app.harness.ablation import REFERENCE_CONDITIONS
from trajectories.models import AblationMatrix
from trajectories.tasks import ablation_matrix_run_task

pytestmark = pytest.mark.django_db


def test_researcher_creates_a_matrix_that_is_queued_on_commit(
    researcher_api, demo_benchmark, django_capture_on_commit_callbacks
):
    body = {"benchmark": demo_benchmark.pk, "runs": 2, "query_limit": 3}
    with django_capture_on_commit_callbacks() as callbacks:
        response = researcher_api.post("/api/ablation-matrices/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["status"], data["policy"], data["progress"]) == ("queued", "baseline", 0.0)
    assert data["conditions"] == list(REFERENCE_CONDITIONS)
    assert data["episodes_total"] == len(REFERENCE_CONDITIONS) * 2 * 3
    assert data["created_by"] == "rita" and data["result"] == {}
    assert len(callbacks) == 1


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"runs": 50}, "runs", "runs must be between 1 and 20, got 50"),
        ({"conditions": ["minus_magic"]}, "conditions", '"minus_magic" is not a valid choice.'),
        ({"conditions": []}, "conditions", "choose at least one condition"),
        ({"policy": "gpt-oss"}, "policy", "policy 'gpt-oss' cannot run in-process"),
        ({"benchmark": 999999}, "benchmark", 'Invalid pk "999999" - object does not exist.'),
    ],
)
def test_bad_parameters_are_400_naming_the_field(
    researcher_api, demo_benchmark, extra, field, message
):
    body = {"benchmark": demo_benchmark.pk} | extra
    response = researcher_api.post("/api/ablation-matrices/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == [field]
    assert message in str(errors[field])
    assert not AblationMatrix.objects.exists()


def test_annotator_cannot_create_but_reads_the_result(
    researcher_api, annotator_api, demo_benchmark, django_capture_on_commit_callbacks
):
    body = {"benchmark": demo_benchmark.pk, "query_limit": 2, "conditions": ["full"]}
    refused = annotator_api.post("/api/ablation-matrices/", body, format="json")
    assert refused.status_code == 403
    assert "needs the researcher role" in refused.json()["detail"]
    assert not AblationMatrix.objects.exists()
    with django_capture_on_commit_callbacks():
        created = researcher_api.post("/api/ablation-matrices/", body, format="json").json()
    ablation_matrix_run_task(created["id"])
    listed = annotator_api.get("/api/ablation-matrices/").json()
    assert [m["id"] for m in listed["results"]] == [created["id"]]
    data = annotator_api.get(f"/api/ablation-matrices/{created['id']}/").json()
    assert (data["status"], data["episodes_done"], data["progress"]) == ("done", 2, 1.0)
    (full,) = data["result"]["conditions"]
    assert (full["condition"], full["n"], full["runs"]) == ("full", 2, 1)
    metrics = ("recall", "trajectory_recall", "final_answer_recall", "tool_diversity", "turns")
    assert {f"{m}_{s}" for m in (*metrics, "errors") for s in ("mean", "std")} <= set(full)
    assert full["recall_mean"] > 0 and full["tool_diversity_mean"] > 1


def test_anonymous_requests_are_refused(anonymous_api):
    assert anonymous_api.get("/api/ablation-matrices/").status_code in (401, 403)
