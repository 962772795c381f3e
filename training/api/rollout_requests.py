"""/api/rollout-requests/: the rollout service for outside trainers (docs/api.md), for
researchers: submit a batch spec, pull evaluated groups as they finish, acknowledge each
one, cancel. Each action's input and answer shapes sit beside it."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import IsResearcher, request_user
from harness_app.harness.llm.reconstruct import PREFIX_MERGE, STRATEGIES
from harness_app.models import Benchmark, PolicyConfig
from harness_app.serializers import RowIdField
from training import selectors
from training.models import DeliveryState, RolloutRequest, RolloutRequestStatus
from training.selectors import rollout_request_counts, rollout_request_reason
from training.services import rollout_service

# The longest a pull may wait for a group: it holds a web worker meanwhile.
MAX_PULL_WAIT_S = 20.0


class RolloutRequestCreateSerializer(serializers.Serializer[Any]):
    """Types only: ranges and the query selection are checked by
    rollout_service.rollout_request_create, which names what it refuses."""

    benchmark = RowIdField(queryset=Benchmark.objects.all())
    policy = RowIdField(
        queryset=PolicyConfig.objects.all(),
        help_text="the policy config to sample from (a served adapter is one: an RL policy "
        "version's or an SFT job's)",
    )
    policy_version = serializers.IntegerField(
        default=0, help_text="the trainer's number for this policy; staleness counts from it"
    )
    group_size = serializers.IntegerField(
        help_text=f"episodes per group, 2 to {rollout_service.MAX_GROUP_SIZE}"
    )
    groups_wanted = serializers.IntegerField(help_text="groups the trainer will acknowledge")
    over_sample = serializers.FloatField(
        default=1.0,
        help_text="launch ceil(groups_wanted x this) groups, "
        f"{rollout_service.MIN_OVER_SAMPLE} to {rollout_service.MAX_OVER_SAMPLE}; the extra "
        "ones are cancelled once enough are delivered",
    )
    staleness_bound = serializers.IntegerField(
        default=0,
        help_text="a group sampled more than this many versions behind the version a "
        "trainer pulls with is dropped as stale",
    )
    lease_s = serializers.IntegerField(
        default=300, help_text="seconds a pulled group waits for its ack before redelivery"
    )
    sampling = serializers.DictField(
        default=dict, help_text="overrides of the policy's sampling (temperature, top_p, ...)"
    )
    query_ids = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        allow_null=True,
        default=None,
        help_text="the queries (pks of the benchmark) to draw groups from, in order; "
        "default: the benchmark's, in order",
    )
    max_turns = serializers.IntegerField(default=40)
    normalize_std = serializers.BooleanField(
        default=False, help_text="divide advantages by the group's reward std (GRPO)"
    )
    reconstruction = serializers.ChoiceField(choices=list(STRATEGIES), default=PREFIX_MERGE)


class RolloutCountsSerializer(serializers.Serializer[Any]):
    playing = serializers.IntegerField()
    ready = serializers.IntegerField()
    leased = serializers.IntegerField()
    acked = serializers.IntegerField()
    zero_variance = serializers.IntegerField()
    stale = serializers.IntegerField()
    straggler = serializers.IntegerField()
    failed = serializers.IntegerField()


REASON_HELP = (
    "why the request finished (satisfied, exhausted or cancelled) and how many groups "
    "were acknowledged or dropped; empty while open"
)


class RolloutRequestSerializer(serializers.ModelSerializer[RolloutRequest]):
    counts = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField(help_text=REASON_HELP)

    class Meta:
        model = RolloutRequest
        fields = [
            "id",
            "status",
            "benchmark",
            "policy",
            "policy_version",
            "batch",
            "group_size",
            "groups_wanted",
            "over_sample",
            "groups_launched",
            "staleness_bound",
            "lease_s",
            "sampling",
            "normalize_std",
            "reconstruction",
            "counts",
            "reason",
            "created_at",
            "finished_at",
        ]

    @extend_schema_field(RolloutCountsSerializer)
    def get_counts(self, request: RolloutRequest) -> dict[str, int]:
        # The list's queryset annotates the counts (rollout_requests_queryset); a request
        # fresh from a service does not carry them.
        if hasattr(request, "n_playing"):
            return {state: getattr(request, f"n_{state}") for state in DeliveryState.values}
        return rollout_request_counts(request_id=request.pk)

    def get_reason(self, request: RolloutRequest) -> str:
        return rollout_request_reason(
            status=request.status,
            groups_wanted=request.groups_wanted,
            counts=self.get_counts(request),
        )


class RolloutPullSerializer(serializers.Serializer[Any]):
    policy_version = serializers.IntegerField(
        help_text="the trainer's current policy version (for the staleness bound)"
    )
    max_groups = serializers.IntegerField(default=1, help_text=f"1 to {rollout_service.MAX_PULL}")
    consumer = serializers.CharField(
        default="", allow_blank=True, max_length=200, help_text="a name for logs and the admin"
    )
    wait_s = serializers.FloatField(
        default=0.0,
        min_value=0.0,
        max_value=MAX_PULL_WAIT_S,
        help_text="wait up to this long for a group when none is ready (long polling)",
    )


class RolloutSampleSerializer(serializers.Serializer[Any]):
    """One token-faithful sequence (training/rl/batches.py TrainSequence)."""

    sample_id = serializers.CharField()
    group_id = serializers.IntegerField()
    episode_id = serializers.IntegerField()
    segment_idx = serializers.IntegerField()
    policy_version = serializers.CharField(help_text="the model name the calls were sampled from")
    prompt_ids = serializers.ListField(child=serializers.IntegerField())
    response_ids = serializers.ListField(child=serializers.IntegerField())
    loss_mask = serializers.ListField(
        child=serializers.IntegerField(), help_text="1 on sampled tokens, aligned with response_ids"
    )
    rollout_logprobs = serializers.ListField(child=serializers.FloatField())
    reward = serializers.FloatField()
    advantage = serializers.FloatField()
    termination_reason = serializers.CharField()


class RolloutEpisodeSerializer(serializers.Serializer[Any]):
    episode_id = serializers.IntegerField()
    reward = serializers.FloatField(allow_null=True)
    advantage = serializers.FloatField(allow_null=True)
    excluded = serializers.CharField(help_text="why it has no samples; empty when it has")


class RolloutGroupSerializer(serializers.Serializer[Any]):
    delivery = serializers.IntegerField()
    lease = serializers.UUIDField(help_text="acknowledge the group with this")
    lease_expires_at = serializers.DateTimeField()
    group = serializers.IntegerField()
    query = serializers.CharField(help_text="the query's id in its benchmark")
    policy_version = serializers.IntegerField()
    times_delivered = serializers.IntegerField(help_text="above 1: a redelivery")
    rewards = serializers.ListField(child=serializers.FloatField())
    advantages = serializers.ListField(child=serializers.FloatField())
    episodes = RolloutEpisodeSerializer(many=True)
    samples = RolloutSampleSerializer(many=True)


class RolloutPullResultSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=RolloutRequestStatus.choices)
    groups = RolloutGroupSerializer(many=True)
    counts = RolloutCountsSerializer()
    reason = serializers.CharField(help_text=REASON_HELP)


class RolloutAckSerializer(serializers.Serializer[Any]):
    lease = serializers.CharField(help_text="the lease token of a pulled group")


class RolloutAckResultSerializer(serializers.Serializer[Any]):
    delivery = serializers.IntegerField()
    already_acked = serializers.BooleanField()
    status = serializers.ChoiceField(choices=RolloutRequestStatus.choices)
    reason = serializers.CharField(help_text=REASON_HELP)


class LeaseNotFound(APIException):
    status_code = status.HTTP_404_NOT_FOUND
    default_detail = "no such lease"
    default_code = "lease_unknown"


class LeaseConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the lease expired"
    default_code = "lease_expired"


# How often a long-polling pull looks again for a finished group.
PULL_POLL_S = 0.25


class RolloutRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[RolloutRequest]
):
    """The rollout service for outside trainers (docs/api.md): submit a batch spec, pull
    evaluated groups as they finish, acknowledge each one. Researchers only."""

    permission_classes = [IsResearcher]
    serializer_class = RolloutRequestSerializer

    def get_queryset(self) -> QuerySet[RolloutRequest]:
        return selectors.rollout_requests_queryset()

    @extend_schema(
        request=RolloutRequestCreateSerializer, responses={201: RolloutRequestSerializer}
    )
    def create(self, request: Request) -> Response:
        """Check the spec and launch its over-sampled groups on the rollout workers."""
        form = RolloutRequestCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            created = rollout_service.rollout_request_create(
                created_by=request_user(request), **form.validated_data
            )
        except rollout_service.RolloutServiceError as exc:
            raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
        data = RolloutRequestSerializer(created).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RolloutPullSerializer, responses={200: RolloutPullResultSerializer})
    @action(detail=True, methods=["post"])
    def pull(self, request: Request, pk: str) -> Response:
        """Lease up to `max_groups` finished, evaluated groups: token ids, logprobs, loss
        masks, rewards and group-relative advantages. Acknowledge each with `ack/` before
        its lease ends, or it is delivered again."""
        rollout_request = self.get_object()
        form = RolloutPullSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        args = form.validated_data
        deadline = time.monotonic() + args["wait_s"]
        while True:
            try:
                result = rollout_service.rollout_groups_pull(
                    request=rollout_request,
                    trainer_version=args["policy_version"],
                    max_groups=args["max_groups"],
                    consumer=args["consumer"],
                )
            except rollout_service.RolloutServiceError as exc:
                raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
            waiting = result.status == RolloutRequestStatus.OPEN and not result.groups
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(PULL_POLL_S)
        # Answered as built: the serializer describes the shape for the schema, but running
        # its per-item fields over every token id would cost more than building the group.
        return Response(
            {
                "status": result.status,
                "reason": result.reason,
                "groups": result.groups,
                "counts": result.counts,
            }
        )

    @extend_schema(
        request=RolloutAckSerializer,
        responses={
            200: RolloutAckResultSerializer,
            404: OpenApiResponse(description="no lease of this request has that token"),
            409: OpenApiResponse(
                description="the lease expired or was superseded; the group is delivered again"
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def ack(self, request: Request, pk: str) -> Response:
        """Acknowledge one pulled group by its lease token; acking it again is fine."""
        rollout_request = self.get_object()
        form = RolloutAckSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            acked = rollout_service.rollout_group_ack(
                request=rollout_request, token=form.validated_data["lease"]
            )
        except rollout_service.LeaseUnknown as exc:
            raise LeaseNotFound(str(exc)) from None
        except rollout_service.LeaseExpired as exc:
            raise LeaseConflict(str(exc)) from None
        return Response(RolloutAckResultSerializer(asdict(acked)).data)

    @extend_schema(request=None, responses={200: RolloutRequestSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Stop the request: its episodes are cancelled and nothing more is delivered."""
        rollout_request = self.get_object()
        rollout_service.rollout_request_cancel(request=rollout_request)
        return Response(
            RolloutRequestSerializer(self.get_queryset().get(pk=rollout_request.pk)).data
        )
