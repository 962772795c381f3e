"""The rollout service's contract, driven through its services with episodes played on
paper (the worker-driven and HTTP paths are in test_rollout_service_live.py)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from tests.training_rl.rollout_service import deliveries, group_play, request_create
from training.models import DeliveryState, RolloutDelivery, RolloutRequestStatus
from training.services.rollout_service import (
    LeaseExpired,
    LeaseUnknown,
    RolloutServiceError,
    rollout_group_ack,
    rollout_groups_pull,
)
from trajectories.models import Episode, EpisodeStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def policy(db: None) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="served",
        kind=PolicyKind.OPENAI,
        base_url="http://127.0.0.1:8011/v1",
        model="m",
        sampling={"temperature": 1.0, "max_tokens": 64},
    )


def _expire(delivery_id: int) -> None:
    past = timezone.now() - timedelta(seconds=1)
    RolloutDelivery.objects.filter(pk=delivery_id).update(lease_expires_at=past)
    RolloutDelivery.objects.get(pk=delivery_id).leases.update(expires_at=past)


# --- create ----------------------------------------------------------------------------------


def test_a_request_launches_its_over_sampled_groups_as_one_batch(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, groups_wanted=3, over_sample=1.5)
    assert request.groups_launched == 5  # ceil(3 x 1.5)
    assert [d.state for d in deliveries(request)] == [DeliveryState.PLAYING] * 5
    assert request.batch is not None
    assert request.batch.episodes.count() == 5 * 2


def test_sampling_overrides_sample_from_a_copy_of_the_policy(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, sampling={"temperature": 0.6})
    assert request.policy.sampling == {"temperature": 0.6, "max_tokens": 64}
    assert request.policy.base_url == policy.base_url
    again = request_create(demo_benchmark, policy, sampling={"temperature": 0.6})
    assert again.policy_id == request.policy_id  # one copy per distinct sampling


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"group_size": 1}, "group_size", "group_size must be between 2 and 64, got 1"),
        ({"over_sample": 9.0}, "over_sample", "over_sample must be between 1.0 and 4.0"),
        ({"groups_wanted": 7, "over_sample": 2.0}, "groups_wanted", "needs 14 queries"),
        ({"query_ids": [10**9]}, "query_ids", r"query ids \[1000000000\] are not queries"),
        ({"reconstruction": "magic"}, "reconstruction", "reconstruction 'magic' is not one"),
        ({"sampling": {"heat": 2}}, "sampling", "sampling: unknown setting 'heat'"),
        ({"sampling": {"max_tokens": 0.5}}, "sampling", "max_tokens must be an integer"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(demo_benchmark, policy, spec, field, message):
    with pytest.raises(RolloutServiceError, match=message) as caught:
        request_create(demo_benchmark, policy, **spec)
    assert caught.value.field == field
    assert not Episode.objects.exists()


def test_the_baseline_takes_no_sampling_overrides(demo_benchmark):
    with pytest.raises(RolloutServiceError, match="sampling overrides need an OpenAI"):
        request_create(demo_benchmark, factories.baseline_policy(), sampling={"top_p": 0.5})


# --- pull ------------------------------------------------------------------------------------


def test_groups_are_delivered_as_they_finish_with_tokens_rewards_and_advantages(
    demo_benchmark, policy
):
    request = request_create(demo_benchmark, policy, groups_wanted=2)
    first, _second = deliveries(request)
    assert rollout_groups_pull(request=request, trainer_version=0).groups == []
    episode_ids = group_play(first, [1.0, 0.0])
    pulled = rollout_groups_pull(request=request, trainer_version=0, max_groups=4)
    assert [g["delivery"] for g in pulled.groups] == [first.pk]
    group = pulled.groups[0]
    assert group["rewards"] == [1.0, 0.0]
    assert group["advantages"] == [0.5, -0.5]
    assert [e["episode_id"] for e in group["episodes"]] == episode_ids
    sample = group["samples"][0]
    n = episode_ids[0] % 50
    # The two calls prefix-merge into one sequence; the tool tokens between are masked.
    assert sample["prompt_ids"] == [1, 504, 33]
    assert sample["response_ids"] == [288 + n, 4521, 30, 77 + n, 2]
    assert sample["loss_mask"] == [1, 1, 0, 1, 1]
    assert sample["rollout_logprobs"] == [-0.5, -0.5, 0.0, -0.5, -0.5]
    assert sample["advantage"] == 0.5
    assert pulled.counts[DeliveryState.LEASED] == 1
    assert pulled.counts[DeliveryState.PLAYING] == 1


def test_std_normalisation_divides_by_the_group_std(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, normalize_std=True)
    group_play(deliveries(request)[0], [1.0, 0.0])
    [group] = rollout_groups_pull(request=request, trainer_version=0).groups
    assert group["advantages"] == pytest.approx([1.0, -1.0], abs=1e-5)


def test_a_zero_variance_group_is_counted_and_never_delivered(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, groups_wanted=1, over_sample=2.0)
    flat, varied = deliveries(request)
    group_play(flat, [0.7, 0.7])
    pulled = rollout_groups_pull(request=request, trainer_version=0)
    assert pulled.groups == []
    assert pulled.counts[DeliveryState.ZERO_VARIANCE] == 1
    group_play(varied, [0.7, 0.1])
    assert [
        g["delivery"] for g in rollout_groups_pull(request=request, trainer_version=0).groups
    ] == [varied.pk]


def test_groups_too_many_versions_behind_the_trainer_are_stale(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, policy_version=3, staleness_bound=1)
    for delivery in deliveries(request):
        group_play(delivery, [1.0, 0.0])
    pulled = rollout_groups_pull(request=request, trainer_version=4)  # one behind: fine
    assert len(pulled.groups) == 1
    pulled = rollout_groups_pull(request=request, trainer_version=5)  # two behind: stale
    assert pulled.groups == []
    assert pulled.counts[DeliveryState.STALE] == 1
    assert pulled.counts[DeliveryState.LEASED] == 1  # the lessee's group is left to it


def test_over_sampling_cancels_the_extra_groups_once_enough_are_ready(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, groups_wanted=2, over_sample=2.0)
    a, b, c, d = deliveries(request)
    group_play(a, [1.0, 0.0])
    group_play(c, [0.0, 1.0])
    pulled = rollout_groups_pull(request=request, trainer_version=0, max_groups=10)
    assert [g["delivery"] for g in pulled.groups] == [a.pk, c.pk]
    assert pulled.counts[DeliveryState.STRAGGLER] == 2
    stragglers = Episode.objects.filter(group_id__in=[b.group_id, d.group_id])
    assert set(stragglers.values_list("status", flat=True)) == {EpisodeStatus.CANCELLED}
    for group in pulled.groups:
        rollout_group_ack(request=request, token=group["lease"])
    request.refresh_from_db()
    assert request.status == RolloutRequestStatus.SATISFIED
    assert request.batch is not None
    request.batch.refresh_from_db()
    assert request.batch.status == "failed"  # cancelled episodes count as not completed
    assert rollout_groups_pull(request=request, trainer_version=0).groups == []


def test_no_more_groups_are_leased_than_wanted(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, groups_wanted=1, over_sample=2.0)
    for delivery in deliveries(request):
        group_play(delivery, [1.0, 0.0])
    assert len(rollout_groups_pull(request=request, trainer_version=0, max_groups=5).groups) == 1
    assert rollout_groups_pull(request=request, trainer_version=0, max_groups=5).groups == []


def test_a_request_whose_groups_all_dropped_is_exhausted(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, groups_wanted=2)
    for delivery in deliveries(request):
        group_play(delivery, [0.2, 0.2])
    pulled = rollout_groups_pull(request=request, trainer_version=0)
    assert pulled.status == RolloutRequestStatus.EXHAUSTED
    assert pulled.counts[DeliveryState.ZERO_VARIANCE] == 2


def test_a_request_with_too_few_deliverable_groups_finishes_after_its_last_ack(
    demo_benchmark, policy
):
    # As seen: 12 wanted, over_sample 1.0; 2 groups zero-variance, the other 10 acked.
    # Nothing is left to deliver, so the request must end instead of staying open.
    request = request_create(demo_benchmark, policy, groups_wanted=12)
    *varied, flat_a, flat_b = deliveries(request)
    for delivery in varied:
        group_play(delivery, [1.0, 0.0])
    group_play(flat_a, [0.5, 0.5])
    group_play(flat_b, [0.0, 0.0])
    pulled = rollout_groups_pull(request=request, trainer_version=0, max_groups=12)
    assert len(pulled.groups) == 10
    acks = [rollout_group_ack(request=request, token=g["lease"]) for g in pulled.groups]
    assert [a.status for a in acks] == [RolloutRequestStatus.OPEN] * 9 + [
        RolloutRequestStatus.EXHAUSTED
    ]
    assert (pulled.status, pulled.reason) == (RolloutRequestStatus.OPEN, "")
    assert acks[-1].reason == (
        "nothing left to deliver: 10 of the 12 groups wanted were acknowledged; "
        "dropped: 2 zero_variance"
    )
    after = rollout_groups_pull(request=request, trainer_version=0)
    assert (after.status, after.groups) == (RolloutRequestStatus.EXHAUSTED, [])
    assert after.reason == acks[-1].reason
    assert after.counts[DeliveryState.ACKED] == 10
    assert after.counts[DeliveryState.ZERO_VARIANCE] == 2
    request.refresh_from_db()
    assert (request.status, request.finished_at is not None) == ("exhausted", True)


def test_the_last_drop_closes_a_request_whose_other_groups_were_acked(demo_benchmark, policy):
    # The other order: the acks come first, the failed group is evaluated on a later pull.
    request = request_create(demo_benchmark, policy, groups_wanted=2)
    played, failing = deliveries(request)
    group_play(played, [1.0, 0.0])
    [group] = rollout_groups_pull(request=request, trainer_version=0).groups
    assert rollout_group_ack(request=request, token=group["lease"]).status == "open"
    Episode.objects.filter(group_id=failing.group_id).update(status=EpisodeStatus.FAILED)
    pulled = rollout_groups_pull(request=request, trainer_version=0)
    assert pulled.status == RolloutRequestStatus.EXHAUSTED
    assert pulled.reason.endswith("1 of the 2 groups wanted were acknowledged; dropped: 1 failed")


def test_a_satisfied_request_says_why(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy, groups_wanted=1)
    group_play(deliveries(request)[0], [1.0, 0.0])
    [group] = rollout_groups_pull(request=request, trainer_version=0).groups
    acked = rollout_group_ack(request=request, token=group["lease"])
    assert (acked.status, acked.reason) == (
        "satisfied",
        "1 of the 1 groups wanted were acknowledged",
    )


# --- ack and redelivery ----------------------------------------------------------------------


def test_acking_twice_is_fine_and_says_so(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy)
    group_play(deliveries(request)[0], [1.0, 0.0])
    [group] = rollout_groups_pull(request=request, trainer_version=0).groups
    first = rollout_group_ack(request=request, token=group["lease"])
    again = rollout_group_ack(request=request, token=group["lease"])
    assert (first.already_acked, again.already_acked) == (False, True)
    assert RolloutDelivery.objects.get(pk=group["delivery"]).state == DeliveryState.ACKED


def test_an_unknown_lease_is_refused_by_name(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy)
    token = uuid.uuid4()
    with pytest.raises(LeaseUnknown, match=f"lease {token} is not a lease of rollout request"):
        rollout_group_ack(request=request, token=str(token))
    with pytest.raises(LeaseUnknown, match="'nope' is not a lease token"):
        rollout_group_ack(request=request, token="nope")


def test_a_group_not_acked_within_its_lease_goes_to_the_next_consumer(demo_benchmark, policy):
    request = request_create(demo_benchmark, policy)
    group_play(deliveries(request)[0], [1.0, 0.0])
    [first] = rollout_groups_pull(request=request, trainer_version=0, consumer="a").groups
    assert rollout_groups_pull(request=request, trainer_version=0, consumer="b").groups == []
    _expire(first["delivery"])
    with pytest.raises(LeaseExpired, match="the group will be delivered again"):
        rollout_group_ack(request=request, token=first["lease"])
    [second] = rollout_groups_pull(request=request, trainer_version=0, consumer="b").groups
    assert second["delivery"] == first["delivery"]
    assert second["lease"] != first["lease"]
    assert second["times_delivered"] == 2
    assert second["samples"] == first["samples"]
    with pytest.raises(LeaseExpired, match="delivered again, under a newer lease"):
        rollout_group_ack(request=request, token=first["lease"])
    assert rollout_group_ack(request=request, token=second["lease"]).already_acked is False
