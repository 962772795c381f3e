"""The API for evaluation runs, researchers only: create, list, read, cancel, and the run's
mean ± std table, paired comparison and transfer table (JSON or CSV). Thin views: serializers
check types, the service and selectors do the rest and name the field at fault."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from harness_app.api import NOT_QUEUED_ANSWER, IsResearcher, not_queued, request_user
from trajectories.models import EvaluationRun
from trajectories.selectors import evaluations as selectors
from trajectories.serializers import (
    EvaluationCancelSerializer,
    EvaluationCompareQuerySerializer,
    EvaluationCompareSerializer,
    EvaluationRunCreateSerializer,
    EvaluationRunDetailSerializer,
    EvaluationRunSerializer,
    EvaluationTableSerializer,
    EvaluationTransferQuerySerializer,
    EvaluationTransferSerializer,
)
from trajectories.services import evaluations


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
