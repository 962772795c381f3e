"""/api/rollout-requests/: the rollout service over HTTP (researchers only)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from harness_app.models import PolicyConfig, PolicyKind
from tests.training_rl.rollout_service import deliveries, group_play
from training.models import RolloutDelivery, RolloutLease, RolloutRequest

pytestmark = pytest.mark.django_db


@pytest.fixture
def policy(db: None) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="served", kind=PolicyKind.OPENAI, base_url="http://127.0.0.1:8011/v1", model="m"
    )


def _spec(benchmark, policy, **extra):
    return {
        "benchmark": benchmark.pk,
        "policy": policy.pk,
        "group_size": 2,
        "groups_wanted": 1,
        **extra,
    }


def _submit(api, benchmark, policy, **extra) -> dict:
    response = api.post("/api/rollout-requests/", _spec(benchmark, policy, **extra), format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_researcher_submits_pulls_and_acks(researcher_api, demo_benchmark, policy):
    created = _submit(researcher_api, demo_benchmark, policy, over_sample=2.0, lease_s=30)
    assert created["groups_launched"] == 2
    assert created["counts"]["playing"] == 2
    url = f"/api/rollout-requests/{created['id']}/"
    empty = researcher_api.post(url + "pull/", {"policy_version": 0}, format="json").json()
    assert (empty["status"], empty["groups"]) == ("open", [])
    group_play(deliveries(RolloutRequest.objects.get())[0], [1.0, 0.0])
    pulled = researcher_api.post(url + "pull/", {"policy_version": 0}, format="json").json()
    [group] = pulled["groups"]
    assert group["advantages"] == [0.5, -0.5]
    assert group["samples"][0]["loss_mask"] == [1, 1, 0, 1, 1]
    assert pulled["counts"]["straggler"] == 1  # the extra group was cancelled
    first = researcher_api.post(url + "ack/", {"lease": group["lease"]}, format="json")
    again = researcher_api.post(url + "ack/", {"lease": group["lease"]}, format="json")
    assert (first.status_code, again.status_code) == (200, 200)
    assert (first.json()["already_acked"], again.json()["already_acked"]) == (False, True)
    assert again.json()["status"] == "satisfied"
    assert again.json()["reason"] == "1 of the 1 groups wanted were acknowledged"
    assert researcher_api.get(url).json()["counts"]["acked"] == 1
    assert researcher_api.get(url).json()["reason"] == again.json()["reason"]


def test_a_request_left_with_nothing_to_deliver_ends_with_its_reason(
    researcher_api, demo_benchmark, policy
):
    created = _submit(researcher_api, demo_benchmark, policy, groups_wanted=2)
    url = f"/api/rollout-requests/{created['id']}/"
    assert created["reason"] == ""
    varied, flat = deliveries(RolloutRequest.objects.get())
    group_play(varied, [1.0, 0.0])
    group_play(flat, [0.4, 0.4])
    pulled = researcher_api.post(url + "pull/", {"policy_version": 0}, format="json").json()
    assert (pulled["status"], pulled["reason"]) == ("open", "")
    acked = researcher_api.post(
        url + "ack/", {"lease": pulled["groups"][0]["lease"]}, format="json"
    )
    reason = (
        "nothing left to deliver: 1 of the 2 groups wanted were acknowledged; "
        "dropped: 1 zero_variance"
    )
    assert (acked.json()["status"], acked.json()["reason"]) == ("exhausted", reason)
    again = researcher_api.post(url + "pull/", {"policy_version": 0, "wait_s": 5}, format="json")
    assert (again.json()["status"], again.json()["reason"]) == ("exhausted", reason)
    listed = researcher_api.get("/api/rollout-requests/").json()["results"][0]
    assert (listed["status"], listed["reason"]) == ("exhausted", reason)


def test_acking_an_unknown_or_expired_lease_answers_clearly(researcher_api, demo_benchmark, policy):
    created = _submit(researcher_api, demo_benchmark, policy)
    url = f"/api/rollout-requests/{created['id']}/"
    unknown = researcher_api.post(url + "ack/", {"lease": str(uuid.uuid4())}, format="json")
    assert unknown.status_code == 404
    assert "is not a lease of rollout request" in unknown.json()["detail"]
    group_play(deliveries(RolloutRequest.objects.get())[0], [1.0, 0.0])
    [group] = researcher_api.post(url + "pull/", {"policy_version": 0}, format="json").json()[
        "groups"
    ]
    past = timezone.now() - timedelta(seconds=1)
    RolloutDelivery.objects.update(lease_expires_at=past)
    RolloutLease.objects.update(expires_at=past)
    expired = researcher_api.post(url + "ack/", {"lease": group["lease"]}, format="json")
    assert expired.status_code == 409
    assert "the group will be delivered again" in expired.json()["detail"]


def test_a_bad_spec_is_400_naming_the_field(researcher_api, demo_benchmark, policy):
    response = researcher_api.post(
        "/api/rollout-requests/", _spec(demo_benchmark, policy, group_size=1), format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"group_size": ["group_size must be between 2 and 64, got 1"]}
    bad_pull = researcher_api.post(
        f"/api/rollout-requests/{_submit(researcher_api, demo_benchmark, policy)['id']}/pull/",
        {"policy_version": 0, "max_groups": 0},
        format="json",
    )
    assert bad_pull.status_code == 400
    assert "max_groups must be between 1 and 64" in bad_pull.json()["max_groups"][0]
    assert RolloutRequest.objects.count() == 1


def test_only_researchers_use_the_service(annotator_api, anonymous_api, demo_benchmark, policy):
    spec = _spec(demo_benchmark, policy)
    assert annotator_api.post("/api/rollout-requests/", spec, format="json").status_code == 403
    assert annotator_api.get("/api/rollout-requests/").status_code == 403
    assert anonymous_api.post("/api/rollout-requests/", spec, format="json").status_code == 401
    assert not RolloutRequest.objects.exists()


def test_the_list_counts_groups_in_one_query(
    researcher_api, demo_benchmark, policy, django_assert_max_num_queries
):
    for _ in range(3):
        _submit(researcher_api, demo_benchmark, policy)
    with django_assert_max_num_queries(6):  # auth and token, count, the page
        response = researcher_api.get("/api/rollout-requests/")
    assert [r["counts"]["playing"] for r in response.json()["results"]] == [1, 1, 1]


def test_cancel_stops_the_request(researcher_api, demo_benchmark, policy):
    created = _submit(researcher_api, demo_benchmark, policy)
    url = f"/api/rollout-requests/{created['id']}/"
    cancelled = researcher_api.post(url + "cancel/").json()
    assert (cancelled["status"], cancelled["reason"]) == (
        "cancelled",
        "cancelled with 0 of the 1 groups wanted acknowledged",
    )
    pulled = researcher_api.post(url + "pull/", {"policy_version": 0}, format="json").json()
    assert (pulled["status"], pulled["groups"]) == ("cancelled", [])
