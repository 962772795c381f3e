"""The API for episodes: the list page's filters over a cursor, one episode with its turns
and model calls, and the reward-hacking candidates."""

from __future__ import annotations

import math
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import CanBrowse
from harness_app.ids import as_id
from trajectories.api.filters import FILTER_PARAMETERS, query_filters
from trajectories.episode_filters import episodes_matching
from trajectories.models import Episode
from trajectories.selectors.annotation import reward_hacking_candidates
from trajectories.serializers import (
    EpisodeDetailSerializer,
    EpisodeSerializer,
    RewardHackingSerializer,
    episode_trajectory_data,
)


class EpisodeCursor(CursorPagination):
    """Newest first. A cursor costs no COUNT and stays stable while rollouts add rows."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request: Request) -> int | None:
        """A page size that is not a whole number is refused, not quietly replaced by the
        default as DRF does; one above max_page_size is cut to it."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is not None and as_id(raw) is None:
            raise ValidationError(
                {self.page_size_query_param: [f"expected a whole number from 1, got {raw!r}"]}
            )
        return super().get_page_size(request)


class EpisodeViewSet(viewsets.ReadOnlyModelViewSet[Episode]):
    """Episodes with the list page's filters; one episode with its turns and model calls."""

    permission_classes = [CanBrowse]
    pagination_class = EpisodeCursor

    def get_queryset(self) -> QuerySet[Episode]:
        if self.action == "list":
            return episodes_matching(filters=query_filters(self.request))
        return Episode.objects.select_related("query", "batch")

    def get_serializer_class(self) -> Any:
        return EpisodeDetailSerializer if self.action == "retrieve" else EpisodeSerializer

    @extend_schema(parameters=FILTER_PARAMETERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Turns with their full harness states, and every model call with token ids."""
        episode = self.get_object()
        return Response(
            episode_trajectory_data(episode=episode, context=self.get_serializer_context())
        )

    @extend_schema(
        parameters=[OpenApiParameter("min_reward", OpenApiTypes.NUMBER)],
        responses={200: RewardHackingSerializer(many=True)},
    )
    @action(detail=False, methods=["get"], url_path="reward-hacking", pagination_class=None)
    def reward_hacking(self, request: Request) -> Response:
        """Rejected episodes whose reward is at least that of the average approved one."""
        raw = request.query_params.get("min_reward") or None
        try:
            min_reward = None if raw is None else float(raw)
        except ValueError:
            min_reward = math.nan
        if min_reward is not None and not math.isfinite(min_reward):
            raise ValidationError({"min_reward": [f"expected a finite number, got {raw!r}"]})
        rows = reward_hacking_candidates(min_reward=min_reward)
        return Response(RewardHackingSerializer(rows, many=True).data)
