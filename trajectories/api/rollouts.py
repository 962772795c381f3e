"""The API for rollouts: batches, episodes and annotations (docs/api.md walks through it).

Thin views: an input serializer checks types, a service or selector does the work, an
output serializer answers. Errors name the field: `{"max_turns": ["max_turns must be …"]}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import CanBrowse, IsResearcher, ResearcherWrites, request_user
from harness_app.roles import Role, user_has_role
from trajectories.episode_filters import (
    FILTER_KEYS,
    ID_FILTERS,
    RANGE_FILTERS,
    EpisodeFilterError,
    episode_filters_clean,
    episodes_matching,
)
from trajectories.models import (
    Annotation,
    AnnotationBulkAction,
    Episode,
    ModelCall,
    RolloutBatch,
    Turn,
)
from trajectories.selectors import rollouts as selectors
from trajectories.serializers import (
    AgreementSerializer,
    AnnotationCreateSerializer,
    AnnotationNextSerializer,
    AnnotationSerializer,
    AssignmentSerializer,
    BatchCancelSerializer,
    BatchCreateSerializer,
    BatchSerializer,
    BatchStatusSerializer,
    BulkActionSerializer,
    BulkApplySerializer,
    BulkCountSerializer,
    BulkPreviewSerializer,
    BulkUndoSerializer,
    EpisodeDetailSerializer,
    EpisodeSerializer,
    RewardHackingSerializer,
)
from trajectories.services import rollouts as services
from trajectories.services.annotations import (
    AnnotationError,
    annotation_agreement,
    annotation_bulk_apply,
    annotation_bulk_preview,
    annotation_bulk_undo,
    annotation_label,
    annotation_next,
    reward_hacking_candidates,
)

NOT_FILTERS = {"cursor", "format", "page", "page_size"}

FILTER_PARAMETERS = [
    OpenApiParameter(
        key,
        OpenApiTypes.INT
        if key in ID_FILTERS
        else OpenApiTypes.NUMBER
        if key in RANGE_FILTERS
        else OpenApiTypes.STR,
        description="q: text in the question" if key == "q" else "",
    )
    for key in FILTER_KEYS
]


def filters_from(raw: Mapping[str, Any], *, prefix: str = "") -> dict[str, Any]:
    """Checked episode filters, or a 400 that names the bad one."""
    try:
        return episode_filters_clean(raw)
    except EpisodeFilterError as exc:
        raise ValidationError({f"{prefix}{exc.key}": [exc.detail]}) from None


def _query_filters(request: Request) -> dict[str, Any]:
    raw = {k: v for k, v in request.query_params.items() if k not in NOT_FILTERS}
    return filters_from(raw)


# --- batches --------------------------------------------------------------------------------


def batch_error_field(message: str) -> str:
    """Which input a BatchParameterError is about (its message starts with the name)."""
    for name in ("samples_per_query", "max_turns", "termination_policy", "query_limit"):
        if message.startswith(name):
            return name
    if "mechanism" in message:
        return "ablate"
    if "reward weight" in message or "weight" in message:
        return "reward_weights"
    return "benchmark"


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
        summary = selectors.batch_summary(batch=batch)
        return Response(BatchStatusSerializer(batch, context={"summary": summary}).data)

    @extend_schema(request=BatchCreateSerializer, responses={201: BatchSerializer})
    def create(self, request: Request) -> Response:
        """Create the batch and queue one task per episode once it is committed."""
        form = BatchCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            batch = services.batch_create(created_by=request_user(request), **form.validated_data)
        except services.BatchParameterError as exc:
            raise ValidationError({batch_error_field(str(exc)): [str(exc)]}) from None
        return Response(BatchSerializer(batch).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: BatchCancelSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Pending episodes never start; running ones stop after their current turn."""
        batch = self.get_object()
        cancelled = services.batch_cancel(batch=batch)
        batch.refresh_from_db()
        return Response({"cancelled": cancelled, "status": batch.status})


# --- episodes -------------------------------------------------------------------------------


class EpisodeCursor(CursorPagination):
    """Newest first. A cursor costs no COUNT and stays stable while rollouts add rows."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class EpisodeViewSet(viewsets.ReadOnlyModelViewSet[Episode]):
    """Episodes with the list page's filters; one episode with its turns and model calls."""

    permission_classes = [CanBrowse]
    pagination_class = EpisodeCursor

    def get_queryset(self) -> QuerySet[Episode]:
        if self.action == "list":
            return episodes_matching(filters=_query_filters(self.request))
        return Episode.objects.select_related("query", "batch")

    def get_serializer_class(self) -> Any:
        return EpisodeDetailSerializer if self.action == "retrieve" else EpisodeSerializer

    @extend_schema(parameters=FILTER_PARAMETERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Turns with their full harness states, and every model call with token ids."""
        episode = self.get_object()
        context = {
            **self.get_serializer_context(),
            "states": selectors.turn_states(episode=episode),
            "turns": list(Turn.objects.filter(episode=episode).defer("state").order_by("index")),
            "calls": list(ModelCall.objects.filter(episode=episode).order_by("turn_index", "pk")),
        }
        return Response(EpisodeDetailSerializer(episode, context=context).data)

    @extend_schema(
        parameters=[OpenApiParameter("min_reward", OpenApiTypes.NUMBER)],
        responses={200: RewardHackingSerializer(many=True)},
    )
    @action(detail=False, methods=["get"], url_path="reward-hacking")
    def reward_hacking(self, request: Request) -> Response:
        """Rejected episodes whose reward is at least that of the average approved one."""
        raw = request.query_params.get("min_reward") or None
        try:
            min_reward = None if raw is None else float(raw)
        except ValueError:
            raise ValidationError({"min_reward": [f"expected a number, got {raw!r}"]}) from None
        rows = reward_hacking_candidates(min_reward=min_reward)
        return Response(RewardHackingSerializer(rows, many=True).data)


# --- annotations ----------------------------------------------------------------------------


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
            if not episode.isdigit():
                raise ValidationError({"episode": [f"expected an episode id, got {episode!r}"]})
            rows = rows.filter(episode_id=int(episode))
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
            raise _annotation_error(exc, "episode") from None
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
        bulk = annotation_bulk_apply(
            actor=request.user, filters=filters, label=data["label"], reason=data["reason"]
        )
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
        return Response(annotation_agreement(filters=_query_filters(request)))
