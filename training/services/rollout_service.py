"""The trainer-facing rollout service: an outside trainer asks for evaluated groups and
pulls them as they finish, each under a lease it acknowledges.

    rollout_request_create  a batch spec → one over-sampled rollout batch, a delivery row
                            per group (state `playing`)
    rollout_groups_pull     finished groups are evaluated (ready, zero_variance, failed);
                            ready ones, and leased ones whose lease expired, are leased to
                            the caller with their tokens, rewards and advantages
    rollout_group_ack       the caller's lease token → `acked`, idempotently

Delivery is at-least-once: a group whose lease expires before its ack is delivered again,
under a new lease, so a consumer that dies loses nothing. Once `groups_wanted` groups are
acknowledged or spoken for (ready or leased), the groups still playing are stragglers: their
pending episodes are cancelled and they are never delivered. A group whose rewards are all
equal carries no signal and is dropped (`zero_variance`); a group sampled from a policy
version more than `staleness_bound` versions behind the trainer's is dropped (`stale`).
A request ends `satisfied` once `groups_wanted` are acknowledged, and `exhausted` as soon as
no group is left playing, ready or leased short of that; pulls and acks answer the status
with a `reason` in words (training.selectors.rollout_request_reason).

Lock order, everywhere: the request row, then delivery rows. Candidates are leased with
`select_for_update(skip_locked=True)`, so a delivery that an ack holds is skipped rather
than waited for.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, TypedDict

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from harness_app.harness.llm.reconstruct import STRATEGIES
from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from harness_app.serializers import SAMPLING_TYPES
from training.models import (
    DeliveryState,
    RolloutDelivery,
    RolloutLease,
    RolloutRequest,
    RolloutRequestStatus,
)
from training.rl.advantages import AdvantageSettings, group_advantage_values
from training.rl.batches import EpisodeCalls, Exclusion, TrainSequence, build_sequences
from training.rl.samples import rl_episodes_for_groups
from training.selectors import rollout_request_counts, rollout_request_reason
from trajectories.models import Episode, EpisodeStatus, RolloutGroup
from trajectories.services import rollouts

MIN_GROUP_SIZE, MAX_GROUP_SIZE = 2, rollouts.MAX_SAMPLES_PER_QUERY
MAX_GROUPS_WANTED = 10_000
MIN_OVER_SAMPLE, MAX_OVER_SAMPLE = 1.0, 4.0
MIN_LEASE_S, MAX_LEASE_S = 1, 24 * 3600
MAX_STALENESS = 1000
MAX_PULL = 64
# batch_create's keywords, as this service's spec names them.
_BATCH_FIELDS = {"samples_per_query": "group_size", "query_ids": "query_ids"}


class RolloutServiceError(ValueError):
    """A spec or call the service refuses; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class LeaseUnknown(RolloutServiceError):
    """No lease of this request has that token."""


class LeaseExpired(RolloutServiceError):
    """The lease ran out before its ack; the group is (or will be) delivered again."""


# --- create ----------------------------------------------------------------------------------


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not (low <= value <= high) or (isinstance(value, float) and math.isnan(value)):
        raise RolloutServiceError(
            f"{name} must be between {low} and {high}, got {value}", field=name
        )


def _sampled_policy(policy: PolicyConfig, overrides: Mapping[str, Any]) -> PolicyConfig:
    """The policy itself, or a copy whose sampling carries the overrides (one copy per
    distinct sampling, reused by later requests)."""
    if not overrides:
        return policy
    if policy.kind == PolicyKind.BASELINE:
        raise RolloutServiceError(
            "sampling overrides need an OpenAI-compatible policy; the baseline samples nothing",
            field="sampling",
        )
    for key, value in overrides.items():
        kind = SAMPLING_TYPES.get(key)
        if kind is None:
            raise RolloutServiceError(
                f"sampling: unknown setting {key!r}; use {', '.join(SAMPLING_TYPES)}",
                field="sampling",
            )
        numeric = (int, float) if kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, numeric):
            wanted = "a number" if kind is float else "an integer"
            raise RolloutServiceError(
                f"sampling: {key} must be {wanted}, got {value!r}", field="sampling"
            )
    merged = {**policy.sampling, **overrides}
    digest = hashlib.sha256(json.dumps(merged, sort_keys=True).encode()).hexdigest()[:12]
    copied = {f: getattr(policy, f) for f in PolicyConfig.EDITABLE_FIELDS if f != "name"}
    derived, _ = PolicyConfig.objects.get_or_create(
        name=f"{policy.name[:180]}~{digest}", defaults={**copied, "sampling": merged}
    )
    return derived


def _launch_queries(benchmark: Benchmark, query_ids: Sequence[int] | None, n: int) -> list[int]:
    pool = list(benchmark.queries.order_by("pk").values_list("pk", flat=True))
    if query_ids is not None:
        known = set(pool)
        missing = [q for q in query_ids if q not in known]
        if missing:
            raise RolloutServiceError(
                f"query ids {missing[:5]} are not queries of benchmark {benchmark.name!r}",
                field="query_ids",
            )
        pool = list(dict.fromkeys(query_ids))
    if len(pool) < n:
        raise RolloutServiceError(
            f"groups_wanted x over_sample needs {n} queries (one group each); the selection "
            f"has {len(pool)}",
            field="groups_wanted",
        )
    return pool[:n]


@transaction.atomic
def rollout_request_create(
    *,
    benchmark: Benchmark,
    policy: PolicyConfig,
    group_size: int,
    groups_wanted: int,
    created_by: Any = None,
    policy_version: int = 0,
    over_sample: float = 1.0,
    staleness_bound: int = 0,
    lease_s: int = 300,
    sampling: Mapping[str, Any] | None = None,
    query_ids: Sequence[int] | None = None,
    max_turns: int = 40,
    normalize_std: bool = False,
    reconstruction: str = "prefix_merge",
) -> RolloutRequest:
    """Check the spec, launch ceil(groups_wanted x over_sample) groups as one rollout
    batch (enqueued on commit) and record a delivery per group."""
    _check_range("group_size", group_size, MIN_GROUP_SIZE, MAX_GROUP_SIZE)
    _check_range("groups_wanted", groups_wanted, 1, MAX_GROUPS_WANTED)
    _check_range("over_sample", over_sample, MIN_OVER_SAMPLE, MAX_OVER_SAMPLE)
    _check_range("staleness_bound", staleness_bound, 0, MAX_STALENESS)
    _check_range("lease_s", lease_s, MIN_LEASE_S, MAX_LEASE_S)
    _check_range("policy_version", policy_version, 0, 2**31 - 1)
    if reconstruction not in STRATEGIES:
        raise RolloutServiceError(
            f"reconstruction {reconstruction!r} is not one of {list(STRATEGIES)}",
            field="reconstruction",
        )
    launched = math.ceil(groups_wanted * over_sample - 1e-9)
    sampled = _sampled_policy(policy, sampling or {})
    chosen = _launch_queries(benchmark, query_ids, launched)
    try:
        batch = rollouts.batch_create(
            benchmark=benchmark,
            policy=sampled,
            created_by=created_by,
            samples_per_query=group_size,
            max_turns=max_turns,
            query_ids=chosen,
        )
    except rollouts.BatchParameterError as exc:
        raise RolloutServiceError(
            str(exc), field=_BATCH_FIELDS.get(exc.field or "", exc.field)
        ) from exc
    request = RolloutRequest.objects.create(
        created_by=created_by if getattr(created_by, "pk", None) else None,
        benchmark=benchmark,
        policy=sampled,
        policy_version=policy_version,
        batch=batch,
        group_size=group_size,
        groups_wanted=groups_wanted,
        over_sample=over_sample,
        groups_launched=launched,
        staleness_bound=staleness_bound,
        lease_s=lease_s,
        sampling=dict(sampling or {}),
        normalize_std=normalize_std,
        reconstruction=reconstruction,
    )
    RolloutDelivery.objects.bulk_create(
        RolloutDelivery(request=request, group_id=pk, policy_version=policy_version)
        for pk in RolloutGroup.objects.filter(batch=batch)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return request


@transaction.atomic
def rollout_request_cancel(*, request: RolloutRequest) -> None:
    """Stop the request: its batch is cancelled and nothing more is delivered."""
    locked = RolloutRequest.objects.select_for_update().get(pk=request.pk)
    if locked.status != RolloutRequestStatus.OPEN:
        return
    locked.status, locked.finished_at = RolloutRequestStatus.CANCELLED, timezone.now()
    locked.save(update_fields=["status", "finished_at"])
    if locked.batch is not None:
        rollouts.batch_cancel(batch=locked.batch)


# --- evaluate finished groups, drop stragglers -----------------------------------------------


def _evaluate_finished(request: RolloutRequest) -> None:
    """Classify the groups whose episodes all ended: ready, zero_variance or failed."""
    unfinished = Episode.objects.filter(
        group_id=OuterRef("group_id"), status__in=[EpisodeStatus.PENDING, EpisodeStatus.RUNNING]
    )
    finished = list(
        RolloutDelivery.objects.select_for_update(skip_locked=True)
        .filter(request=request, state=DeliveryState.PLAYING)
        .exclude(Exists(unfinished))
        .values_list("pk", "group_id")
    )
    if not finished:
        return
    rewards: dict[int, list[float]] = {}
    completed = Episode.objects.filter(
        group_id__in=[g for _, g in finished], status=EpisodeStatus.COMPLETED, reward__isnull=False
    )
    for group_id, reward in completed.values_list("group_id", "reward"):
        rewards.setdefault(group_id, []).append(float(reward or 0.0))
    by_state: dict[str, list[int]] = {}
    for pk, group_id in finished:
        values = rewards.get(group_id, [])
        state: str
        if not values:
            state = DeliveryState.FAILED
        elif group_advantage_values(values) is None:
            state = DeliveryState.ZERO_VARIANCE
        else:
            state = DeliveryState.READY
        by_state.setdefault(state, []).append(pk)
    now = timezone.now()
    for new_state, pks in by_state.items():
        RolloutDelivery.objects.filter(pk__in=pks).update(state=new_state, ready_at=now)


def _settle(request: RolloutRequest) -> dict[str, int]:
    """Drop stragglers once enough groups are spoken for; close a satisfied or exhausted
    request. `request` is locked by the caller. Returns the counts by state."""
    counts = rollout_request_counts(request_id=request.pk)
    if request.status != RolloutRequestStatus.OPEN:
        return counts
    acked, leased, ready, playing = (
        counts[s]
        for s in (
            DeliveryState.ACKED,
            DeliveryState.LEASED,
            DeliveryState.READY,
            DeliveryState.PLAYING,
        )
    )
    if acked >= request.groups_wanted:
        _drop_stragglers(request, [DeliveryState.PLAYING, DeliveryState.READY])
        _close(request, RolloutRequestStatus.SATISFIED)
    elif acked + leased + ready >= request.groups_wanted:
        _drop_stragglers(request, [DeliveryState.PLAYING])
    elif leased + ready + playing == 0:
        # Short of groups_wanted with nothing left that could reach the trainer. (Acked
        # groups once counted here as still taken, and such a request stayed open forever.)
        _close(request, RolloutRequestStatus.EXHAUSTED)
    return rollout_request_counts(request_id=request.pk)


def _reason(request: RolloutRequest, counts: dict[str, int]) -> str:
    return rollout_request_reason(
        status=request.status, groups_wanted=request.groups_wanted, counts=counts
    )


def _drop_stragglers(request: RolloutRequest, states: list[str]) -> None:
    dropped = RolloutDelivery.objects.filter(request=request, state__in=states)
    group_ids = list(dropped.values_list("group_id", flat=True))
    if group_ids:
        dropped.update(state=DeliveryState.STRAGGLER)
        rollouts.groups_cancel(group_ids=group_ids)


def _close(request: RolloutRequest, status: str) -> None:
    request.status, request.finished_at = status, timezone.now()
    request.save(update_fields=["status", "finished_at"])


def _drop_stale(request: RolloutRequest, trainer_version: int, now: Any) -> None:
    """Waiting groups sampled more than `staleness_bound` versions behind the trainer are
    never delivered (a group under a live lease is the lessee's to finish)."""
    oldest = trainer_version - request.staleness_bound
    waiting = RolloutDelivery.objects.filter(request=request, policy_version__lt=oldest)
    waiting.filter(state=DeliveryState.READY).update(state=DeliveryState.STALE)
    waiting.filter(state=DeliveryState.LEASED, lease_expires_at__lte=now).update(
        state=DeliveryState.STALE
    )


# --- pull ------------------------------------------------------------------------------------


class EpisodeJson(TypedDict):
    episode_id: int
    reward: float | None
    advantage: float | None
    excluded: str


class DeliveredGroup(TypedDict):
    delivery: int
    lease: str
    lease_expires_at: str
    group: int
    query: str
    policy_version: int
    times_delivered: int
    rewards: list[float]
    advantages: list[float]
    episodes: list[EpisodeJson]
    samples: list[dict[str, Any]]


@dataclass(frozen=True)
class PullResult:
    status: str
    groups: list[DeliveredGroup]
    counts: dict[str, int]
    reason: str


def rollout_groups_pull(
    *, request: RolloutRequest, trainer_version: int, max_groups: int = 1, consumer: str = ""
) -> PullResult:
    """Lease up to `max_groups` evaluated groups to the caller, with their sequences."""
    _check_range("max_groups", max_groups, 1, MAX_PULL)
    _check_range("policy_version", trainer_version, 0, 2**31 - 1)
    with transaction.atomic():
        locked = RolloutRequest.objects.select_for_update().get(pk=request.pk)
        now = timezone.now()
        _evaluate_finished(locked)
        _drop_stale(locked, trainer_version, now)
        counts = _settle(locked)
        leased: list[tuple[RolloutDelivery, RolloutLease]] = []
        if locked.status == RolloutRequestStatus.OPEN:
            leased = _lease(locked, counts, max_groups, trainer_version, consumer, now)
            counts = rollout_request_counts(request_id=locked.pk)
    return PullResult(
        status=locked.status,
        groups=_payloads(locked, leased),
        counts=counts,
        reason=_reason(locked, counts),
    )


def _lease(
    request: RolloutRequest,
    counts: dict[str, int],
    max_groups: int,
    trainer_version: int,
    consumer: str,
    now: Any,
) -> list[tuple[RolloutDelivery, RolloutLease]]:
    deliveries = RolloutDelivery.objects.filter(request=request)
    held = deliveries.filter(state=DeliveryState.LEASED, lease_expires_at__gt=now).count()
    slots = min(max_groups, request.groups_wanted - counts[DeliveryState.ACKED] - held)
    if slots <= 0:
        return []
    due = deliveries.filter(state=DeliveryState.READY) | deliveries.filter(
        state=DeliveryState.LEASED, lease_expires_at__lte=now
    )
    picked = list(due.select_for_update(skip_locked=True).order_by("pk")[:slots])
    expires = now + timedelta(seconds=request.lease_s)
    out = []
    for delivery in picked:
        lease = RolloutLease.objects.create(
            delivery=delivery,
            token=uuid.uuid4(),
            consumer=consumer[:200],
            trainer_version=trainer_version,
            leased_at=now,
            expires_at=expires,
        )
        delivery.state, delivery.lease_expires_at = DeliveryState.LEASED, expires
        delivery.times_delivered += 1
        delivery.save(update_fields=["state", "lease_expires_at", "times_delivered"])
        out.append((delivery, lease))
    return out


def _payloads(
    request: RolloutRequest, leased: list[tuple[RolloutDelivery, RolloutLease]]
) -> list[DeliveredGroup]:
    if not leased:
        return []
    group_ids = [d.group_id for d, _ in leased]
    candidates, excluded = rl_episodes_for_groups(group_ids=group_ids)
    queries = dict(
        RolloutGroup.objects.filter(pk__in=group_ids).values_list("pk", "query__external_id")
    )
    members: dict[int, list[int]] = {}
    for group_id, pk in Episode.objects.filter(group_id__in=group_ids).values_list(
        "group_id", "pk"
    ):
        members.setdefault(group_id, []).append(pk)
    settings = AdvantageSettings(normalize_std=request.normalize_std, drop_zero_variance=False)
    return [
        _payload(
            request,
            delivery,
            lease,
            queries[delivery.group_id],
            sorted(members.get(delivery.group_id, [])),
            [c for c in candidates if c.group_id == delivery.group_id],
            excluded,
            settings,
        )
        for delivery, lease in leased
    ]


def _payload(
    request: RolloutRequest,
    delivery: RolloutDelivery,
    lease: RolloutLease,
    query: str,
    episode_ids: list[int],
    candidates: list[EpisodeCalls],
    excluded: list[Exclusion],
    settings: AdvantageSettings,
) -> DeliveredGroup:
    """One group: its rewards and group-relative advantages over its completed episodes,
    and the token-faithful sequences of the episodes that can be trained on."""
    rewards = [c.reward for c in candidates]
    advantages = group_advantage_values(rewards, settings) or [0.0] * len(rewards)
    by_episode = {c.episode_id: a for c, a in zip(candidates, advantages, strict=True)}
    build = build_sequences(candidates, by_episode, mode=request.reconstruction)
    why = {e.episode_id: e.reason for e in [*build.exclusions, *excluded]}
    rewards_of = {c.episode_id: c.reward for c in candidates}
    return DeliveredGroup(
        delivery=delivery.pk,
        lease=str(lease.token),
        lease_expires_at=lease.expires_at.isoformat(),
        group=delivery.group_id,
        query=query,
        policy_version=delivery.policy_version,
        times_delivered=delivery.times_delivered,
        rewards=rewards,
        advantages=advantages,
        episodes=[
            EpisodeJson(
                episode_id=e,
                reward=rewards_of.get(e),
                advantage=by_episode.get(e),
                excluded=why.get(e, ""),
            )
            for e in episode_ids
        ],
        samples=[_sample_json(s) for s in build.sequences],
    )


def _sample_json(sequence: TrainSequence) -> dict[str, Any]:
    # Not dataclasses.asdict: it deep-copies every token list, the bulk of a payload.
    return {f.name: getattr(sequence, f.name) for f in fields(sequence)}


# --- ack -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AckResult:
    delivery: int
    already_acked: bool
    status: str
    reason: str


def _lease_problem(lease: RolloutLease, delivery: RolloutDelivery, now: Any) -> str:
    if delivery.state == DeliveryState.ACKED:
        return f"the group was acknowledged under another lease at {delivery.acked_at}"
    latest = delivery.leases.order_by("-pk").values_list("pk", flat=True).first()
    if latest != lease.pk:
        return "the group was delivered again, under a newer lease"
    if delivery.state != DeliveryState.LEASED or lease.expires_at <= now:
        return (
            f"it expired at {lease.expires_at.isoformat()}; the group will be delivered again"
            if delivery.state == DeliveryState.LEASED
            else f"it expired and the group was then dropped ({delivery.state})"
        )
    return ""


@transaction.atomic
def rollout_group_ack(*, request: RolloutRequest, token: str) -> AckResult:
    """Acknowledge one delivered group by its lease token. Acking the same lease again
    answers `already_acked`; an unknown token raises LeaseUnknown, an expired or
    superseded one LeaseExpired."""
    try:
        parsed = uuid.UUID(str(token))
    except ValueError:
        raise LeaseUnknown(
            f"lease {token!r} is not a lease token (a UUID)", field="lease"
        ) from None
    locked = RolloutRequest.objects.select_for_update().get(pk=request.pk)
    lease = RolloutLease.objects.filter(token=parsed, delivery__request=locked).first()
    if lease is None:
        raise LeaseUnknown(
            f"lease {parsed} is not a lease of rollout request {locked.pk}", field="lease"
        )
    delivery = RolloutDelivery.objects.select_for_update().get(pk=lease.delivery_id)
    if lease.acked_at is not None:
        counts = rollout_request_counts(request_id=locked.pk)
        return AckResult(delivery.pk, True, locked.status, _reason(locked, counts))
    now = timezone.now()
    problem = _lease_problem(lease, delivery, now)
    if problem:
        raise LeaseExpired(f"lease {parsed} cannot be acknowledged: {problem}", field="lease")
    lease.acked_at = delivery.acked_at = now
    lease.save(update_fields=["acked_at"])
    delivery.state = DeliveryState.ACKED
    delivery.save(update_fields=["state", "acked_at"])
    counts = _settle(locked)
    return AckResult(delivery.pk, False, locked.status, _reason(locked, counts))
