"""Evaluation runs over the API: researchers create, read, compare and cancel them; the
service's checks answer 400 naming the field; annotators and strangers are refused."""

from __future__ import annotations

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from trajectories.models import Episode, EpisodeStatus, EvaluationRun, RolloutBatch

pytestmark = pytest.mark.django_db


@pytest.fixture
def second_policy(db: None) -> PolicyConfig:
    return PolicyConfig.objects.create(name="baseline-b", kind=PolicyKind.BASELINE)


@pytest.fixture
def created(
    researcher_api,
    demo_benchmark,
    baseline_policy,
    second_policy,
    django_capture_on_commit_callbacks,
):
    body = {
        "name": "two baselines",
        "benchmarks": [demo_benchmark.pk],
        "policies": [baseline_policy.pk, second_policy.pk],
        "query_limit": 2,
    }
    with django_capture_on_commit_callbacks() as callbacks:
        response = researcher_api.post("/api/evaluation-runs/", body, format="json")
    assert response.status_code == 201, response.json()
    assert len(callbacks) == 6  # one enqueue per batch, once committed
    return response.json()


def test_researcher_creates_a_run_of_two_configurations_by_three_runs(created):
    assert (created["status"], created["runs"], created["conditions"]) == ("running", 3, ["full"])
    assert (created["batches_total"], created["batches_finished"]) == (6, 0)
    assert (created["episodes_total"], created["progress"]) == (12, 0.0)
    assert created["created_by"] == "rita"


def test_retrieve_lists_the_configurations_and_the_table_has_a_row_for_each(
    researcher_api, created, baseline_policy, second_policy
):
    detail = researcher_api.get(f"/api/evaluation-runs/{created['id']}/").json()
    keys = [c["key"] for c in detail["configs"]]
    assert keys == [f"{baseline_policy.pk}:full", f"{second_policy.pk}:full"]
    Episode.objects.filter(batch__evaluation_id=created["id"]).update(
        status=EpisodeStatus.COMPLETED, curated_recall=0.5, reward=1.0, turns=4
    )
    table = researcher_api.get(f"/api/evaluation-runs/{created['id']}/table/").json()
    assert [r["config"] for r in table["rows"]] == ["baseline · full", "baseline-b · full"]
    assert all(r["runs"] == 3 and r["n"] == 2 for r in table["rows"])
    compare = researcher_api.get(
        f"/api/evaluation-runs/{created['id']}/compare/", {"a": keys[0], "b": keys[1]}
    ).json()
    assert compare["comparison"]["n"] == 2 and compare["comparison"]["mean_difference"] == 0.0
    csv = researcher_api.get(
        f"/api/evaluation-runs/{created['id']}/transfer-csv/", {"metric": "reward"}
    )
    assert csv["Content-Type"] == "text/csv"
    assert csv.content.decode().splitlines()[1] == "demo,1.0000,0.0000,1.0000,0.0000"


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"a": "1:full"}, "b", "This field is required."),
        ({"a": "x", "b": "y"}, "a", "not a configuration of this run"),
        ({"a": "x", "b": "y", "metric": "vibes"}, "metric", "not a valid choice"),
        ({"a": "x", "b": "y", "benchmark": "99999"}, "a", "not a configuration"),
    ],
)
def test_bad_comparison_parameters_are_400_naming_the_field(
    researcher_api, created, params, field, message
):
    response = researcher_api.get(f"/api/evaluation-runs/{created['id']}/compare/", params)
    assert response.status_code == 400
    assert message in str(response.json()[field])


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"runs": 50}, "runs", "runs must be between 1 and 20, got 50"),
        ({"conditions": ["minus_magic"]}, "conditions", '"minus_magic" is not a valid choice.'),
        ({"conditions": []}, "conditions", "choose at least one of conditions"),
        ({"policies": []}, "policies", "choose at least one of policies"),
        ({"benchmarks": [999999]}, "benchmarks", 'Invalid pk "999999" - object does not exist.'),
    ],
)
def test_bad_parameters_are_400_naming_the_field(
    researcher_api, demo_benchmark, baseline_policy, extra, field, message
):
    body = {"benchmarks": [demo_benchmark.pk], "policies": [baseline_policy.pk]} | extra
    response = researcher_api.post("/api/evaluation-runs/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == [field]
    assert message in str(errors[field])
    assert not EvaluationRun.objects.exists() and not RolloutBatch.objects.exists()


@pytest.mark.parametrize("field", ["query_limit", "max_turns"])
@pytest.mark.parametrize("value", [-1, 2**63, 10**30])
def test_out_of_range_counts_are_400_naming_the_field_with_nothing_written(
    researcher_api, demo_benchmark, baseline_policy, field, value
):
    # Once a 500 (a -1 broke the column's check, 2^63 and 10^30 overflowed it) from an
    # INSERT that ran before the range checks.
    body = {"benchmarks": [demo_benchmark.pk], "policies": [baseline_policy.pk], field: value}
    response = researcher_api.post("/api/evaluation-runs/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == [field]
    assert f"{field} must be between 1 and" in errors[field][0]
    assert f"got {value}" in errors[field][0]
    assert EvaluationRun.objects.count() == 0 and RolloutBatch.objects.count() == 0


def test_annotators_and_strangers_are_refused(
    annotator_api, anonymous_api, created, demo_benchmark, baseline_policy
):
    body = {"benchmarks": [demo_benchmark.pk], "policies": [baseline_policy.pk]}
    refused = annotator_api.post("/api/evaluation-runs/", body, format="json")
    assert refused.status_code == 403
    assert "needs the researcher role" in refused.json()["detail"]
    for path in ("", f"{created['id']}/", f"{created['id']}/table/"):
        assert annotator_api.get(f"/api/evaluation-runs/{path}").status_code == 403
        assert anonymous_api.get(f"/api/evaluation-runs/{path}").status_code in (401, 403)
    assert annotator_api.post(f"/api/evaluation-runs/{created['id']}/cancel/").status_code == 403
    assert EvaluationRun.objects.count() == 1


def test_cancel_stops_the_run(researcher_api, created):
    response = researcher_api.post(f"/api/evaluation-runs/{created['id']}/cancel/")
    assert response.json() == {"cancelled": 12, "status": "cancelled"}
    listed = researcher_api.get("/api/evaluation-runs/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert rows[0]["status"] == "cancelled" and rows[0]["batches_finished"] == 6
