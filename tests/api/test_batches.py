"""Batches: create (with the service's checks as 400s), follow progress, cancel."""

from __future__ import annotations

import pytest

from tests import factories
from trajectories.models import BatchStatus, RolloutBatch

pytestmark = pytest.mark.django_db


def _body(benchmark, policy, **extra):
    return {"benchmark": benchmark.pk, "policy": policy.pk, "query_limit": 2} | extra


def test_researcher_creates_a_batch_that_is_queued_on_commit(
    researcher_api, demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    body = _body(demo_benchmark, baseline_policy, samples_per_query=3, ablate=["compression"])
    with django_capture_on_commit_callbacks() as callbacks:
        response = researcher_api.post("/api/batches/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["status"], data["episodes_total"], data["progress"]) == ("queued", 6, 0.0)
    assert data["ablation_label"] == "-compression" and data["created_by"] == "rita"
    assert len(callbacks) == 1


def test_a_batch_takes_a_reward_preset_and_stores_its_weights(
    researcher_api, demo_benchmark, baseline_policy
):
    weights = {"preset": "harness1", "turn_penalty": 0.05}
    body = _body(demo_benchmark, baseline_policy, reward_weights=weights)
    response = researcher_api.post("/api/batches/", body, format="json")
    assert response.status_code == 201, response.json()
    stored = response.json()["reward_weights"]
    assert (stored["diversity"], stored["turn_penalty"], stored["format_failure_reward"]) == (
        0.25,
        0.05,
        -0.5,
    )


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"max_turns": 1000}, "max_turns", "max_turns must be between 1 and 200, got 1000"),
        ({"samples_per_query": 0}, "samples_per_query", "samples_per_query must be between"),
        ({"reward_weights": {"f2": 1}}, "reward_weights", "unknown reward weight(s) f2"),
        ({"reward_weights": {"preset": "paper"}}, "reward_weights", "unknown reward preset"),
        ({"ablate": ["telepathy"]}, "ablate", '"telepathy" is not a valid choice.'),
        ({"termination_policy": "never"}, "termination_policy", "is not a valid choice"),
        ({"benchmark": 999999}, "benchmark", 'Invalid pk "999999" - object does not exist.'),
    ],
)
def test_bad_parameters_are_400_naming_the_field(
    researcher_api, demo_benchmark, baseline_policy, extra, field, message
):
    body = _body(demo_benchmark, baseline_policy) | extra
    response = researcher_api.post("/api/batches/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == [field]
    assert message in str(errors[field])
    assert not RolloutBatch.objects.exists()


def test_annotator_cannot_launch_a_batch(annotator_api, demo_benchmark, baseline_policy):
    response = annotator_api.post(
        "/api/batches/", _body(demo_benchmark, baseline_policy), format="json"
    )
    assert response.status_code == 403
    assert "needs the researcher role" in response.json()["detail"]
    assert not RolloutBatch.objects.exists()


def test_status_shows_progress_and_metrics(annotator_api, demo_benchmark, baseline_policy):
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    data = annotator_api.get(f"/api/batches/{batch.pk}/").json()
    assert (data["status"], data["progress"]) == ("completed", 1.0)
    assert data["episodes_completed"] == 2
    summary = data["summary"]
    assert summary["termination_reasons"] == {"end_search": 2}
    assert 0 <= summary["metrics"]["curated_recall"] <= 1


def test_cancel_stops_pending_episodes(
    researcher_api, annotator_api, demo_benchmark, baseline_policy
):
    response = researcher_api.post(
        "/api/batches/", _body(demo_benchmark, baseline_policy), format="json"
    )
    batch_id = response.json()["id"]
    assert annotator_api.post(f"/api/batches/{batch_id}/cancel/").status_code == 403
    response = researcher_api.post(f"/api/batches/{batch_id}/cancel/")
    assert response.json() == {"cancelled": 2, "status": "cancelled"}
    assert RolloutBatch.objects.get(pk=batch_id).status == BatchStatus.CANCELLED
    assert researcher_api.post("/api/batches/999999/cancel/").status_code == 404


def test_batch_list_takes_a_fixed_number_of_queries(
    researcher_api, demo_benchmark, baseline_policy, django_assert_num_queries
):
    for _ in range(3):
        researcher_api.post("/api/batches/", _body(demo_benchmark, baseline_policy), format="json")
    with django_assert_num_queries(4):  # token, roles, count, page (joined)
        response = researcher_api.get("/api/batches/")
    assert response.json()["count"] == 3
