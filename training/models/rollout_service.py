"""The trainer-facing rollout service (training/services/rollout_service.py): an outside
trainer's request, each launched group's delivery, and each lease of a group."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from training.models.jobs import Reconstruction


class RolloutRequestStatus(models.TextChoices):
    OPEN = "open", "Open: groups are being played or delivered"
    SATISFIED = "satisfied", "Satisfied: the groups wanted were acknowledged"
    EXHAUSTED = "exhausted", "Exhausted: every group finished, too few were deliverable"
    CANCELLED = "cancelled", "Cancelled"


class DeliveryState(models.TextChoices):
    PLAYING = "playing", "Playing: episodes still run"
    READY = "ready", "Ready: evaluated, waiting for a consumer"
    LEASED = "leased", "Leased to a consumer until its lease expires"
    ACKED = "acked", "Acknowledged by a consumer"
    ZERO_VARIANCE = "zero_variance", "Dropped: every reward of the group is equal"
    STALE = "stale", "Dropped: its policy version is too far behind the trainer's"
    STRAGGLER = "straggler", "Dropped: enough groups were delivered before it"
    FAILED = "failed", "Dropped: no episode of the group completed with a reward"


class RolloutRequest(models.Model):
    """An outside trainer's batch spec: `groups_wanted` evaluated groups of `group_size`
    episodes sampled from `policy` (the trainer's `policy_version`). The service launches
    `groups_launched` (over-sampled) groups as one rollout batch and delivers them as
    they finish, each under a lease the trainer acknowledges."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    benchmark = models.ForeignKey("harness_app.Benchmark", on_delete=models.PROTECT)
    # The policy sampled: the one asked for, or a copy carrying the sampling overrides.
    policy = models.ForeignKey("harness_app.PolicyConfig", on_delete=models.PROTECT)
    policy_version = models.PositiveIntegerField(default=0)
    batch = models.OneToOneField(
        "trajectories.RolloutBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="rollout_request",
    )
    group_size = models.PositiveIntegerField()
    groups_wanted = models.PositiveIntegerField()
    over_sample = models.FloatField(default=1.0)
    groups_launched = models.PositiveIntegerField()
    staleness_bound = models.PositiveIntegerField(default=0)
    lease_s = models.PositiveIntegerField(default=300)
    sampling = models.JSONField(default=dict, blank=True, help_text="overrides as given")
    normalize_std = models.BooleanField(default=False)
    reconstruction = models.CharField(
        max_length=16, choices=Reconstruction.choices, default=Reconstruction.PREFIX_MERGE
    )
    status = models.CharField(
        max_length=10, choices=RolloutRequestStatus.choices, default=RolloutRequestStatus.OPEN
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"rollout request {self.pk}"


class RolloutDelivery(models.Model):
    """One launched group of a request and where it stands on its way to the trainer."""

    request = models.ForeignKey(RolloutRequest, on_delete=models.CASCADE, related_name="deliveries")
    group = models.OneToOneField(
        "trajectories.RolloutGroup", on_delete=models.CASCADE, related_name="delivery"
    )
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PLAYING
    )
    policy_version = models.PositiveIntegerField(default=0)
    times_delivered = models.PositiveIntegerField(default=0)
    # The current lease's end, copied from it so that the pull's query needs no join.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]
        indexes = [models.Index(fields=["request", "state"], name="delivery_request_state")]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.state})"


class RolloutLease(models.Model):
    """One delivery of a group to a consumer; its token is what the consumer acknowledges.
    A group delivered again gets a new lease, so an old token is known and answered as
    expired rather than unknown."""

    delivery = models.ForeignKey(RolloutDelivery, on_delete=models.CASCADE, related_name="leases")
    token = models.UUIDField(unique=True)
    consumer = models.CharField(max_length=200, blank=True)
    trainer_version = models.PositiveIntegerField(default=0)
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"lease {self.token} of {self.delivery}"
