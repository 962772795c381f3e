"""The API for episodes: the list page's filters over a cursor, one episode with its turns
and model calls, and the reward-hacking candidates."""

from __future__ import annotations

import math
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import CanBrowse
from harness_app.ids import as_id
from trajectories.api.filters import FILTER_PARAMETERS, query_filters
from trajectories.episode_filters import episodes_matching
from trajectories.models import (
    Episode,
    ModelCall,
    Turn,
)
from trajectories.selectors.annotation import reward_hacking_candidates
from trajectories.selectors.turns import turn_states

# --- episodes -------------------------------------------------------------------------------


# A failed or cancelled episode was never scored: these are null (services/rollouts.py).
SCORES = ("reward", "curated_recall", "trajectory_recall", "final_answer_recall", "tool_diversity")
UNSCORED = {"help_text": "null for a failed or cancelled episode, and until one completes"}


class EpisodeSerializer(serializers.ModelSerializer[Episode]):
    # Recorded episodes have no batch or query: these read as null for them.
    benchmark = serializers.IntegerField(
        source="batch.benchmark_id", read_only=True, allow_null=True
    )
    policy = serializers.IntegerField(source="batch.policy_id", read_only=True, allow_null=True)
    query_external_id = serializers.CharField(
        source="query.external_id", read_only=True, allow_null=True
    )
    question = serializers.CharField(source="query.text", read_only=True, allow_null=True)

    class Meta:
        model = Episode
        fields = [
            "id",
            "kind",
            "batch",
            "group",
            "benchmark",
            "policy",
            "query",
            "query_external_id",
            "question",
            "sample_index",
            "status",
            "termination_reason",
            "reward",
            "curated_recall",
            "trajectory_recall",
            "final_answer_recall",
            "tool_diversity",
            "turns",
            "format_errors",
            "annotation_status",
            "annotation_count",
            "policy_version",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "sample_index": {"help_text": '0-based; the pages call sample_index 0 "sample 1"'},
            **dict.fromkeys(SCORES, UNSCORED),
        }


class TurnSerializer(serializers.ModelSerializer[Turn]):
    state = serializers.SerializerMethodField()

    class Meta:
        model = Turn
        fields = [
            "index",
            "tool_calls",
            "observation",
            "state",
            "curated_recall",
            "trajectory_recall",
            "final_answer_recall",
            "format_errors",
            "harness_ms",
            "policy_ms",
        ]
        read_only_fields = fields
        extra_kwargs = {"index": {"help_text": "0: the start (no calls); then turns 1, 2, …"}}

    def get_state(self, turn: Turn) -> dict[str, Any]:
        """The full harness state after this turn (deltas applied)."""
        states: list[dict[str, Any]] = self.context["states"]
        return states[turn.index] if turn.index < len(states) else {}


class ModelCallSerializer(serializers.ModelSerializer[ModelCall]):
    prompt_token_ids = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    completion_token_ids = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    completion_logprobs = serializers.ListField(child=serializers.FloatField(), read_only=True)

    class Meta:
        model = ModelCall
        fields = [
            "id",
            "turn_index",
            "request",
            "response",
            "prompt_token_ids",
            "completion_token_ids",
            "completion_logprobs",
            "finish_reason",
            "usage",
            "latency_ms",
            "policy_version",
            "error",
            "created_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "turn_index": {"help_text": "the turn answered; pages number calls 1, 2, …"}
        }


class EpisodeDetailSerializer(EpisodeSerializer):
    turn_rows = serializers.SerializerMethodField()
    model_calls = serializers.SerializerMethodField()

    class Meta(EpisodeSerializer.Meta):
        fields = [
            *EpisodeSerializer.Meta.fields,
            "attempts",
            "error",
            "metrics",
            "reward_components",
            "timings",
            "turn_rows",
            "model_calls",
        ]
        read_only_fields = fields

    def get_turn_rows(self, episode: Episode) -> list[dict[str, Any]]:
        turns = self.context["turns"]
        return list(TurnSerializer(turns, many=True, context=self.context).data)

    def get_model_calls(self, episode: Episode) -> list[dict[str, Any]]:
        return list(ModelCallSerializer(self.context["calls"], many=True).data)


def episode_trajectory_data(*, episode: Episode, context: dict[str, Any] | None = None) -> Any:
    """The whole trajectory of an episode: turns with their harness states (curated set,
    pool), rewards and metrics, and every model call with its token ids.

    One shape for `GET /api/episodes/<id>/` and the viewer's "Download trajectory JSON".
    """
    detail_context = {
        **(context or {}),
        "states": turn_states(episode=episode),
        "turns": list(Turn.objects.filter(episode=episode).defer("state").order_by("index")),
        "calls": list(ModelCall.objects.filter(episode=episode).order_by("turn_index", "pk")),
    }
    return EpisodeDetailSerializer(episode, context=detail_context).data


class RewardHackingSerializer(EpisodeSerializer):
    rejections = serializers.IntegerField(read_only=True)

    class Meta(EpisodeSerializer.Meta):
        fields = [*EpisodeSerializer.Meta.fields, "rejections"]
        read_only_fields = fields


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
