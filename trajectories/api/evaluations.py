"""The API for evaluation runs, researchers only: create, list, read, cancel, and the run's
mean ± std table, paired comparison and transfer table (JSON or CSV). Thin views: serializers
check types, the service and selectors do the rest and name the field at fault."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from harness_app.api import NOT_QUEUED_ANSWER, IsResearcher, not_queued, request_user
from harness_app.ids import MAX_ID
from harness_app.models import Benchmark, PolicyConfig
from harness_app.serializers import BoundedIntegerField, RowIdField
from trajectories.api.fields import ConditionField
from trajectories.models import (
    EvaluationRun,
)
from trajectories.selectors import evaluations as selectors
from trajectories.selectors.evaluations import METRICS as EVALUATION_METRICS
from trajectories.services import evaluations
from trajectories.services.rollouts import MAX_QUERY_LIMIT, MAX_TURNS_LIMIT

# --- evaluation runs ------------------------------------------------------------------------


class EvaluationRunCreateSerializer(serializers.Serializer[Any]):
    """Types and the counts' ranges (a count past its column's range once reached the
    INSERT); the rest is checked by services.evaluations.evaluation_create."""

    name = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    benchmarks = RowIdField(
        queryset=Benchmark.objects.all(), many=True, help_text="benchmark ids (the table's rows)"
    )
    policies = RowIdField(
        queryset=PolicyConfig.objects.all(), many=True, help_text="policy config ids"
    )
    conditions = serializers.ListField(
        child=ConditionField(),
        default=["full"],
        help_text="conditions (minus_<mechanism>, ...); each policy config runs under each",
    )
    runs = serializers.IntegerField(default=3, help_text="runs per cell, 1 to 20")
    query_limit = BoundedIntegerField(
        low=1,
        high=MAX_QUERY_LIMIT,
        required=False,
        allow_null=True,
        default=None,
        help_text="the first Q queries only",
    )
    max_turns = BoundedIntegerField(low=1, high=MAX_TURNS_LIMIT, default=40, help_text="1 to 200")


class EvaluationRunSerializer(serializers.ModelSerializer[EvaluationRun]):
    created_by = serializers.CharField(source="created_by.username", default=None)
    batches_total = serializers.IntegerField(help_text="one batch per cell and run")
    batches_finished = serializers.IntegerField()
    episodes_total = serializers.IntegerField(default=0)
    episodes_completed = serializers.IntegerField(default=0)
    episodes_failed = serializers.IntegerField(default=0)
    progress = serializers.SerializerMethodField(help_text="finished episodes / total, 0 to 1")

    class Meta:
        model = EvaluationRun
        fields = [
            "id",
            "name",
            "status",
            "benchmarks",
            "policies",
            "conditions",
            "runs",
            "query_limit",
            "max_turns",
            "batches_total",
            "batches_finished",
            "episodes_total",
            "episodes_completed",
            "episodes_failed",
            "progress",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_progress(self, evaluation: EvaluationRun) -> float:
        total = getattr(evaluation, "episodes_total", 0) or 0
        done = (getattr(evaluation, "episodes_completed", 0) or 0) + (
            getattr(evaluation, "episodes_failed", 0) or 0
        )
        return round(done / total, 4) if total else 0.0


class EvaluationConfigSerializer(serializers.Serializer[Any]):
    # `label` is added in get_fields: as a class attribute it would shadow Field.label.

    key = serializers.CharField(help_text='"<policy id>:<condition>", for compare\'s a and b')

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["label"] = serializers.CharField(help_text="policy config · condition")
        return fields


class EvaluationRunDetailSerializer(EvaluationRunSerializer):
    configs = serializers.SerializerMethodField()

    class Meta(EvaluationRunSerializer.Meta):
        fields = [*EvaluationRunSerializer.Meta.fields, "configs"]

    @extend_schema_field(EvaluationConfigSerializer(many=True))
    def get_configs(self, evaluation: EvaluationRun) -> list[dict[str, str]]:
        """The run's configurations (policy config x condition): the table's columns."""
        return list(self.context.get("configs") or [])


class EvaluationTableSerializer(serializers.Serializer[Any]):
    metrics = serializers.ListField(child=serializers.CharField())
    columns = serializers.ListField(child=serializers.CharField(), help_text="metric labels")
    rows = serializers.ListField(
        child=serializers.DictField(),
        help_text="one per benchmark x configuration: benchmark, config, config_key, runs, n "
        "(queries per run), failed (episodes), cells (mean ± std per metric) and values "
        "({metric: {mean, std, runs}} or null)",
    )


class EvaluationCompareQuerySerializer(serializers.Serializer[Any]):
    a = serializers.CharField(help_text="configuration key of A (the reference)")
    b = serializers.CharField(help_text="configuration key of B; the difference is B - A")
    metric = serializers.ChoiceField(choices=list(EVALUATION_METRICS), default="curated_recall")
    benchmark = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, help_text="one benchmark; omitted: all"
    )


class EvaluationCompareSerializer(serializers.Serializer[Any]):
    metric = serializers.CharField()
    metric_label = serializers.CharField()
    a = EvaluationConfigSerializer()
    b = EvaluationConfigSerializer()
    benchmark = serializers.CharField(allow_null=True)
    comparison = serializers.DictField(
        allow_null=True,
        help_text="n (paired queries), mean_a, mean_b, mean_difference (B - A), ci_low, "
        "ci_high (percentile bootstrap), confidence, resamples, seed, wins, ties, losses; "
        "null when the two share no completed query",
    )


class EvaluationTransferQuerySerializer(serializers.Serializer[Any]):
    metric = serializers.ChoiceField(choices=list(EVALUATION_METRICS), default="curated_recall")


class EvaluationTransferSerializer(serializers.Serializer[Any]):
    metric = serializers.CharField()
    metric_label = serializers.CharField()
    configs = EvaluationConfigSerializer(many=True)
    rows = serializers.ListField(
        child=serializers.DictField(),
        help_text="one per benchmark: benchmark and cells, one {mean, std, runs} or null per "
        "configuration",
    )


class EvaluationCancelSerializer(serializers.Serializer[Any]):
    cancelled = serializers.IntegerField(help_text="pending episodes that will never start")
    status = serializers.CharField()


def _field_error(exc: evaluations.EvaluationParameterError | selectors.EvaluationQueryError) -> Any:
    field = exc.field or api_settings.NON_FIELD_ERRORS_KEY
    return ValidationError({field: [str(exc)]})


class EvaluationRunViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[EvaluationRun]
):
    """Evaluation runs: benchmarks x policy configs x conditions x R runs, one batch each."""

    permission_classes = [IsResearcher]

    def get_queryset(self) -> QuerySet[EvaluationRun]:
        return selectors.evaluations_for_list().prefetch_related("benchmarks", "policies")

    def get_serializer_class(self) -> Any:
        return (
            EvaluationRunDetailSerializer if self.action == "retrieve" else EvaluationRunSerializer
        )

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Settings, progress, and the configurations (keys for compare)."""
        evaluation = self.get_object()
        configs = [
            {"key": c.key, "label": c.label}
            for c in selectors.evaluation_configs(evaluation=evaluation)
        ]
        return Response(
            EvaluationRunDetailSerializer(evaluation, context={"configs": configs}).data
        )

    @extend_schema(
        request=EvaluationRunCreateSerializer,
        responses={201: EvaluationRunSerializer, 503: NOT_QUEUED_ANSWER},
    )
    def create(self, request: Request) -> Response:
        """Create the run and one batch per cell and run; episodes are queued on commit."""
        form = EvaluationRunCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            evaluation = evaluations.evaluation_create(
                created_by=request_user(request), **form.validated_data
            )
        except evaluations.EvaluationParameterError as exc:
            raise _field_error(exc) from None
        created = self.get_queryset().get(pk=evaluation.pk)
        body = EvaluationRunSerializer(created).data
        # Its batches are what is sent: the first tells whether the broker took them.
        first = evaluation.batches.order_by("pk").first()
        refused = not_queued(first, body) if first is not None else None
        return refused or Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: EvaluationCancelSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Pending episodes never start; running ones stop after their current turn."""
        evaluation = self.get_object()
        cancelled = evaluations.evaluation_cancel(evaluation=evaluation)
        evaluation.refresh_from_db()
        return Response({"cancelled": cancelled, "status": evaluation.status})

    @extend_schema(responses={200: EvaluationTableSerializer})
    @action(detail=True, methods=["get"])
    def table(self, request: Request, pk: str) -> Response:
        """Per benchmark x configuration, each metric's mean ± std over runs."""
        return Response(selectors.evaluation_table(evaluation=self.get_object()))

    @extend_schema(
        parameters=[EvaluationCompareQuerySerializer],
        responses={200: EvaluationCompareSerializer},
    )
    @action(detail=True, methods=["get"])
    def compare(self, request: Request, pk: str) -> Response:
        """B minus A on the same queries, with a 95% percentile bootstrap CI."""
        query = EvaluationCompareQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            result = selectors.evaluation_compare(
                evaluation=self.get_object(), **query.validated_data
            )
        except selectors.EvaluationQueryError as exc:
            raise _field_error(exc) from None
        return Response(result)

    @extend_schema(
        parameters=[EvaluationTransferQuerySerializer],
        responses={200: EvaluationTransferSerializer},
    )
    @action(detail=True, methods=["get"])
    def transfer(self, request: Request, pk: str) -> Response:
        """Benchmark rows x configuration columns of one metric (mean and std over runs)."""
        return Response(self._transfer(request))

    @extend_schema(
        parameters=[EvaluationTransferQuerySerializer],
        responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR)},
    )
    @action(detail=True, methods=["get"], url_path="transfer-csv")
    def transfer_csv(self, request: Request, pk: str) -> HttpResponse:
        """The transfer table as CSV: benchmark, then a mean and a std column per configuration."""
        response = HttpResponse(
            selectors.transfer_csv(self._transfer(request)), content_type="text/csv"
        )
        response["Content-Disposition"] = f'attachment; filename="evaluation-{pk}-transfer.csv"'
        return response

    def _transfer(self, request: Request) -> dict[str, Any]:
        query = EvaluationTransferQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return selectors.evaluation_transfer(evaluation=self.get_object(), **query.validated_data)
