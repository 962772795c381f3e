"""The API for annotations: labels, the annotation queue, bulk actions and agreement.

Annotators see and write only their own labels; researchers see all and bulk-label.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import CanBrowse, IsResearcher
from harness_app.ids import as_id, id_problem
from harness_app.roles import Role, user_has_role
from harness_app.serializers import RowIdField
from trajectories.api.episodes import EpisodeSerializer
from trajectories.api.filters import FILTER_PARAMETERS, filters_from, query_filters
from trajectories.models import (
    Annotation,
    AnnotationBulkAction,
    AnnotationLabel,
    Episode,
)
from trajectories.selectors.agreement import annotation_agreement
from trajectories.selectors.annotation import annotation_bulk_preview
from trajectories.services.annotations import (
    MAX_OVERLAP,
    AnnotationError,
    annotation_bulk_apply,
    annotation_bulk_undo,
    annotation_label,
    annotation_next,
)

# --- annotations ----------------------------------------------------------------------------


class AnnotationSerializer(serializers.ModelSerializer[Annotation]):
    annotator = serializers.CharField(source="annotator.username", read_only=True)

    class Meta:
        model = Annotation
        fields = [
            "id",
            "episode",
            "annotator",
            "label",
            "reason",
            "notes",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class AnnotationCreateSerializer(serializers.Serializer[Any]):
    episode = RowIdField(queryset=Episode.objects.all())
    label = serializers.ChoiceField(choices=AnnotationLabel.choices)  # type: ignore[assignment]
    reason = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    notes = serializers.CharField(required=False, default="", allow_blank=True)


class AnnotationNextSerializer(serializers.Serializer[Any]):
    overlap = serializers.IntegerField(
        min_value=1,
        max_value=MAX_OVERLAP,
        required=False,
        help_text="distinct annotators wanted per episode (default: ANNOTATION_OVERLAP)",
    )
    filters = serializers.DictField(default=dict, help_text="episode filters, as for the list")


class AssignmentSerializer(serializers.Serializer[Any]):
    episode = EpisodeSerializer()
    expires_at = serializers.DateTimeField()


class BulkPreviewSerializer(serializers.Serializer[Any]):
    filters = serializers.DictField(default=dict)


class BulkApplySerializer(BulkPreviewSerializer):
    label = serializers.ChoiceField(choices=AnnotationLabel.choices)  # type: ignore[assignment]
    reason = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    every_episode = serializers.BooleanField(
        required=False,
        default=False,
        help_text="with no filters, label every finished episode; without it, no filters is "
        "refused",
    )


class BulkCountSerializer(serializers.Serializer[Any]):
    episodes = serializers.IntegerField()


class BulkActionSerializer(serializers.ModelSerializer[AnnotationBulkAction]):
    actor = serializers.CharField(source="actor.username", default=None, allow_null=True)

    class Meta:
        model = AnnotationBulkAction
        fields = [
            "id",
            "actor",
            "filters",
            "label",
            "reason",
            "episodes",
            "created_at",
            "undone_at",
        ]
        read_only_fields = fields


class BulkUndoSerializer(serializers.Serializer[Any]):
    restored = serializers.IntegerField(help_text="episodes whose label went back")


class KappaPairSerializer(serializers.Serializer[Any]):
    annotators = serializers.ListField(child=serializers.IntegerField())
    episodes = serializers.IntegerField()
    kappa = serializers.FloatField(allow_null=True)


class FleissSerializer(serializers.Serializer[Any]):
    raters = serializers.IntegerField()
    episodes = serializers.IntegerField()
    kappa = serializers.FloatField(allow_null=True)


class AgreementSerializer(serializers.Serializer[Any]):
    cohen = KappaPairSerializer(many=True)
    fleiss = FleissSerializer()


def _annotation_error(exc: AnnotationError, field: str) -> ValidationError:
    return ValidationError({field: [str(exc)]})


class AnnotationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Annotation]
):
    """Labels. Annotators see and write only their own; researchers see all and bulk-label."""

    permission_classes = [CanBrowse]
    serializer_class = AnnotationSerializer

    def get_queryset(self) -> QuerySet[Annotation]:
        rows = Annotation.objects.select_related("annotator").order_by("-updated_at", "-pk")
        if not user_has_role(self.request.user, Role.RESEARCHER):
            rows = rows.filter(annotator_id=self.request.user.pk)
        episode = self.request.query_params.get("episode")
        if episode:
            episode_id = as_id(episode)
            if episode_id is None:
                raise ValidationError({"episode": [id_problem(episode)]})
            rows = rows.filter(episode_id=episode_id)
        return rows

    @extend_schema(
        parameters=[OpenApiParameter("episode", OpenApiTypes.INT)],
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=AnnotationCreateSerializer, responses={201: AnnotationSerializer})
    def create(self, request: Request) -> Response:
        """Label an episode (a second label by the same annotator replaces the first)."""
        form = AnnotationCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            annotation = annotation_label(annotator=request.user, **form.validated_data)
        except AnnotationError as exc:
            raise _annotation_error(exc, exc.field or "episode") from None
        return Response(AnnotationSerializer(annotation).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=AnnotationNextSerializer,
        responses={200: AssignmentSerializer, 204: OpenApiResponse(description="queue empty")},
    )
    @action(detail=False, methods=["post"])
    def next(self, request: Request) -> Response:
        """Take the next episode to label; it stays yours until labelled or the lock expires."""
        form = AnnotationNextSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        filters = filters_from(form.validated_data["filters"], prefix="filters.")
        assignment = annotation_next(
            annotator=request.user, filters=filters, overlap=form.validated_data.get("overlap")
        )
        if assignment is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(AssignmentSerializer(assignment).data)

    @extend_schema(request=BulkPreviewSerializer, responses={200: BulkCountSerializer})
    @action(
        detail=False, methods=["post"], url_path="bulk/preview", permission_classes=[IsResearcher]
    )
    def bulk_preview(self, request: Request) -> Response:
        """How many finished episodes a bulk label with these filters would touch."""
        form = BulkPreviewSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        filters = filters_from(form.validated_data["filters"], prefix="filters.")
        return Response({"episodes": annotation_bulk_preview(filters=filters)})

    @extend_schema(request=BulkApplySerializer, responses={201: BulkActionSerializer})
    @action(detail=False, methods=["post"], url_path="bulk", permission_classes=[IsResearcher])
    def bulk_apply(self, request: Request) -> Response:
        """Label every finished episode the filters match, as you; undoable."""
        form = BulkApplySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        filters = filters_from(data["filters"], prefix="filters.")
        try:
            bulk = annotation_bulk_apply(
                actor=request.user,
                filters=filters,
                label=data["label"],
                reason=data["reason"],
                every_episode=data["every_episode"],
            )
        except AnnotationError as exc:
            raise _annotation_error(exc, exc.field or "filters") from None
        return Response(BulkActionSerializer(bulk).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: BulkUndoSerializer})
    @action(
        detail=False,
        methods=["post"],
        url_path=r"bulk/(?P<bulk_id>[0-9]+)/undo",
        permission_classes=[IsResearcher],
    )
    def bulk_undo(self, request: Request, bulk_id: str) -> Response:
        """Restore the labels a bulk action replaced (later edits are kept)."""
        bulk = get_object_or_404(AnnotationBulkAction, pk=bulk_id)
        try:
            restored = annotation_bulk_undo(action=bulk, actor=request.user)
        except AnnotationError as exc:
            raise _annotation_error(exc, "bulk_action") from None
        return Response({"restored": restored})

    @extend_schema(parameters=FILTER_PARAMETERS, responses={200: AgreementSerializer})
    @action(detail=False, methods=["get"], permission_classes=[IsResearcher])
    def agreement(self, request: Request) -> Response:
        """Cohen's kappa per annotator pair, Fleiss' kappa over fully overlapped episodes."""
        return Response(annotation_agreement(filters=query_filters(request)))
