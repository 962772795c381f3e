"""The API for rollout batches: researchers launch and cancel them; everyone follows progress.

Thin views: an input serializer checks types, a service does the work, an output
serializer answers. Errors name the field: `{"max_turns": ["max_turns must be …"]}`.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from harness_app.api import NOT_QUEUED_ANSWER, ResearcherWrites, not_queued, request_user
from harness_app.harness.ablation import MECHANISMS
from harness_app.models import Benchmark, PolicyConfig
from harness_app.serializers import RowIdField
from trajectories.models import (
    RolloutBatch,
    TerminationPolicy,
)
from trajectories.selectors import batches
from trajectories.services import resends, rollouts


class BatchCreateSerializer(serializers.Serializer[Any]):
    """Types only: the ranges and the rest are checked by services.batch_create."""

    benchmark = RowIdField(queryset=Benchmark.objects.all())
    policy = RowIdField(queryset=PolicyConfig.objects.all())
    samples_per_query = serializers.IntegerField(default=1, help_text="1 to 64")
    max_turns = serializers.IntegerField(default=40, help_text="1 to 200")
    termination_policy = serializers.ChoiceField(
        choices=TerminationPolicy.choices, default=TerminationPolicy.MAX_TURNS
    )
    ablate = serializers.ListField(
        child=serializers.ChoiceField(choices=MECHANISMS),
        default=list,
        help_text="mechanisms to switch off; the batch is labelled -<mechanism> for each",
    )
    query_limit = serializers.IntegerField(required=False, allow_null=True, default=None)
    reward_weights = serializers.DictField(
        default=dict,
        help_text='weight overrides; {"preset": "harness1"} starts from a named preset',
    )
    teacher_rule = serializers.DictField(
        required=False,
        allow_null=True,
        default=None,
        help_text="a teacher batch's filter rule, fixed once saved: curated_recall_min, "
        "final_answer_recall_min, trajectory_recall_min (0 to 1), format_errors_max, "
        "turns_max, termination_reasons (list); only passing episodes are queued for "
        "annotation. null: not a teacher batch; {}: every completed episode passes",
    )
    capture_tokens = serializers.BooleanField(
        default=True,
        help_text="false for a server that returns no token ids (a hosted API): plain chat "
        "completions, calls recorded without tokens",
    )


class BatchSerializer(serializers.ModelSerializer[RolloutBatch]):
    benchmark_name = serializers.CharField(source="benchmark.name", read_only=True)
    policy_name = serializers.CharField(source="policy.name", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="finished episodes / total, 0 to 1")

    class Meta:
        model = RolloutBatch
        fields = [
            "id",
            "status",
            "benchmark",
            "benchmark_name",
            "policy",
            "policy_name",
            "ablation_label",
            "ablation",
            "samples_per_query",
            "max_turns",
            "termination_policy",
            "query_limit",
            "reward_weights",
            "teacher_rule",
            "capture_tokens",
            "episodes_total",
            "episodes_completed",
            "episodes_failed",
            "progress",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class BatchStatusSerializer(BatchSerializer):
    summary = serializers.SerializerMethodField()

    class Meta(BatchSerializer.Meta):
        fields = [*BatchSerializer.Meta.fields, "summary"]

    def get_summary(self, batch: RolloutBatch) -> dict[str, Any]:
        """Termination reasons, first errors and metric means over completed episodes; for a
        teacher batch, `teacher`: its rule, how many passed and failed, and failures per clause."""
        return dict(self.context.get("summary") or {})


class BatchCancelSerializer(serializers.Serializer[Any]):
    cancelled = serializers.IntegerField(help_text="pending episodes that will never start")
    status = serializers.CharField()


class BatchViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[RolloutBatch]
):
    """Rollout batches: researchers launch and cancel them; everyone follows progress."""

    permission_classes = [ResearcherWrites]

    def get_queryset(self) -> QuerySet[RolloutBatch]:
        return RolloutBatch.objects.select_related("benchmark", "policy", "created_by").order_by(
            "-pk"
        )

    def get_serializer_class(self) -> Any:
        return BatchStatusSerializer if self.action == "retrieve" else BatchSerializer

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Status and progress, termination reasons, first errors and metric means."""
        batch = self.get_object()
        summary = batches.batch_summary(batch=batch)
        return Response(BatchStatusSerializer(batch, context={"summary": summary}).data)

    @extend_schema(
        request=BatchCreateSerializer, responses={201: BatchSerializer, 503: NOT_QUEUED_ANSWER}
    )
    def create(self, request: Request) -> Response:
        """Create the batch and queue one task per episode once it is committed. When the
        task broker is down: 503, the batch kept and failed with the reason in `detail`;
        re-send it with POST /api/batches/{id}/resend/ once the broker is back."""
        form = BatchCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            batch = rollouts.batch_create(created_by=request_user(request), **form.validated_data)
        except rollouts.BatchParameterError as exc:
            field = exc.field or api_settings.NON_FIELD_ERRORS_KEY
            raise ValidationError({field: [str(exc)]}) from None
        body = BatchSerializer(batch).data
        return not_queued(batch, body) or Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: BatchCancelSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Pending episodes never start; running ones stop after their current turn."""
        batch = self.get_object()
        cancelled = rollouts.batch_cancel(batch=batch)
        batch.refresh_from_db()
        return Response({"cancelled": cancelled, "status": batch.status})

    @extend_schema(
        request=None, responses={202: BatchSerializer, 409: None, 503: NOT_QUEUED_ANSWER}
    )
    @action(detail=True, methods=["post"])
    def resend(self, request: Request, pk: str) -> Response:
        """Send again a batch whose episodes could not be sent (the broker was down): its
        pending episodes, each run once. 409 for a batch that was sent; 503, with the
        reason in `detail`, while the broker is still down."""
        batch = self.get_object()
        try:
            resends.batch_resend(batch=batch)
        except resends.BatchNotResendable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        batch.refresh_from_db()
        body = BatchSerializer(batch).data
        return not_queued(batch, body) or Response(body, status=status.HTTP_202_ACCEPTED)
