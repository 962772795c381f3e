"""The API for ablation matrices: researchers launch them; everyone reads their progress and
result (the `ablate --json` document). Thin views: an input serializer checks types, the
service checks the rest and answers field-named errors: `{"runs": ["runs must be …"]}`."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from harness_app.api import NOT_QUEUED_ANSWER, ResearcherWrites, not_queued, request_user
from trajectories.models import AblationMatrix
from trajectories.serializers import AblationMatrixCreateSerializer, AblationMatrixSerializer
from trajectories.services import ablations


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
