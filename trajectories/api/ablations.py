"""The API for ablation matrices: researchers launch them; everyone reads their progress and
result (the `ablate --json` document). Thin views: an input serializer checks types, the
service checks the rest and answers field-named errors: `{"runs": ["runs must be …"]}`."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from harness_app.api import NOT_QUEUED_ANSWER, ResearcherWrites, not_queued, request_user
from harness_app.models import Benchmark, RetrieverKind
from harness_app.serializers import RowIdField
from trajectories.api.fields import ConditionField
from trajectories.models import (
    AblationMatrix,
)
from trajectories.services import ablations

# --- ablation matrices ----------------------------------------------------------------------


class AblationMatrixCreateSerializer(serializers.Serializer[Any]):
    """Types only: the ranges, the policy and the rest are checked by
    services.ablations.ablation_matrix_create."""

    benchmark = RowIdField(queryset=Benchmark.objects.all())
    policy = serializers.CharField(default="baseline", help_text="an in-process policy by name")
    runs = serializers.IntegerField(default=1, help_text="1 to 20")
    query_limit = serializers.IntegerField(required=False, allow_null=True, default=None)
    max_turns = serializers.IntegerField(default=40, help_text="1 to 200")
    retriever = serializers.ChoiceField(
        choices=RetrieverKind.choices,
        default=RetrieverKind.BM25,
        help_text="what every condition's search tool ranks with",
    )
    conditions = serializers.ListField(
        child=ConditionField(),
        required=False,
        allow_null=True,
        default=None,
        help_text="condition names (minus_<mechanism>, ...); omitted or null runs all of them",
    )


class AblationMatrixSerializer(serializers.ModelSerializer[AblationMatrix]):
    benchmark_name = serializers.CharField(source="benchmark.name", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="finished episodes / total, 0 to 1")
    result = serializers.JSONField(
        help_text="once done, the `ablate --json` document: settings and a `conditions` list "
        "whose entries carry condition, n, runs and <metric>_mean / <metric>_std; else {}"
    )

    class Meta:
        model = AblationMatrix
        fields = [
            "id",
            "status",
            "benchmark",
            "benchmark_name",
            "policy",
            "retriever",
            "conditions",
            "runs",
            "query_limit",
            "max_turns",
            "episodes_total",
            "episodes_done",
            "progress",
            "error",
            "result",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class AblationMatrixViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[AblationMatrix]
):
    """Ablation matrices: the named conditions x N runs over a benchmark, in one task."""

    permission_classes = [ResearcherWrites]
    serializer_class = AblationMatrixSerializer

    def get_queryset(self) -> QuerySet[AblationMatrix]:
        matrices = AblationMatrix.objects.select_related("benchmark", "created_by")
        return matrices.order_by("-pk")

    @extend_schema(
        request=AblationMatrixCreateSerializer,
        responses={201: AblationMatrixSerializer, 503: NOT_QUEUED_ANSWER},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Create the matrix and queue its one task once it is committed."""
        form = AblationMatrixCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            matrix = ablations.ablation_matrix_create(
                created_by=request_user(request), **form.validated_data
            )
        except ablations.MatrixParameterError as exc:
            field = exc.field or api_settings.NON_FIELD_ERRORS_KEY
            raise ValidationError({field: [str(exc)]}) from None
        body = AblationMatrixSerializer(matrix).data
        return not_queued(matrix, body) or Response(body, status=status.HTTP_201_CREATED)
