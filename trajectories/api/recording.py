"""The API for recording sessions (docs/proxy.md): create, list, close, revoke, reconstruct.

Researchers create, close and revoke sessions: a key lets its holder spend model-server
time, the same power as launching a rollout batch, which annotators do not have. Anyone
with a role reads sessions and their trajectories. Keys are shown once, in the answer to
the create call.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import ResearcherWrites, request_user
from harness_app.harness.llm.reconstruct import PREFIX_MERGE
from harness_app.harness.llm.reconstruct_report import TrainerShape
from harness_app.ids import as_id, id_problem
from trajectories.models import RecordingSession
from trajectories.selectors import recording as selectors_recording
from trajectories.services import recording


class RecordingCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    task = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text="sessions with the same task are one RL group",
    )
    ttl_s = serializers.IntegerField(required=False, help_text="seconds until the key expires")
    metadata = serializers.JSONField(required=False, default=dict)
    sampling = serializers.JSONField(
        required=False,
        default=dict,
        help_text=(
            "overrides for every call: model_map {asked: served, '*': served}, temperature, "
            "top_p, max_tokens (the clamp's ceiling), clamp (default true)"
        ),
    )


class RecordingCloseSerializer(serializers.Serializer[Any]):
    reward = serializers.FloatField(required=False, allow_null=True, default=None)
    metadata = serializers.JSONField(required=False, default=dict)


class RecordingSerializer(serializers.ModelSerializer[RecordingSession]):
    base_url = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField()
    status = serializers.CharField(source="episode.status", read_only=True)
    reward = serializers.FloatField(source="episode.reward", read_only=True, allow_null=True)
    calls = serializers.IntegerField(source="episode.turns", read_only=True)
    trainable = serializers.BooleanField(read_only=True)

    class Meta:
        model = RecordingSession
        fields = [
            "id",
            "episode",
            "name",
            "task",
            "key_hint",
            "base_url",
            "state",
            "status",
            "reward",
            "calls",
            "trainable",
            "untrainable_reason",
            "metadata",
            "sampling",
            "created_at",
            "expires_at",
            "revoked_at",
            "closed_at",
        ]
        read_only_fields = fields

    def get_base_url(self, session: RecordingSession) -> str | None:
        """The proxy's base URL with the key; only the create call knows the key."""
        key = self.context.get("key")
        if not key:
            return None
        path = reverse("proxy_models", kwargs={"key": key}).removesuffix("/models")
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    def get_state(self, session: RecordingSession) -> str:
        return selectors_recording.session_state(session, now=timezone.now())


class RecordingCreatedSerializer(RecordingSerializer):
    key = serializers.SerializerMethodField()

    class Meta(RecordingSerializer.Meta):
        fields = [*RecordingSerializer.Meta.fields, "key"]
        read_only_fields = fields

    def get_key(self, session: RecordingSession) -> str:
        return str(self.context["key"])


def _own(request: Request, session: RecordingSession) -> RecordingSession:
    if not selectors_recording.recording_session_manageable_by(session, request.user):
        raise PermissionDenied(
            f"recording session {session.pk} is {_owner(session)}'s; only its owner or staff "
            "may close or revoke it"
        )
    return session


def _owner(session: RecordingSession) -> str:
    return session.created_by.get_username() if session.created_by else "nobody"


def _invalid(exc: recording.RecordingError) -> ValidationError:
    return ValidationError({exc.field: [str(exc)]})


class RecordingViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[RecordingSession]
):
    """Recording sessions: an outside agent's calls through the proxy, token by token."""

    permission_classes = [ResearcherWrites]
    serializer_class = RecordingSerializer

    def get_queryset(self) -> QuerySet[RecordingSession]:
        return selectors_recording.recording_sessions()

    @extend_schema(request=RecordingCreateSerializer, responses={201: RecordingCreatedSerializer})
    def create(self, request: Request) -> Response:
        """A new session: its base_url (with the key in it) and the key, shown only now."""
        form = RecordingCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            session, key = recording.recording_session_create(
                user=request_user(request), **form.validated_data
            )
        except recording.RecordingError as exc:
            raise _invalid(exc) from None
        context = {"request": request, "key": key}
        body = RecordingCreatedSerializer(session, context=context).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=RecordingCloseSerializer, responses={200: RecordingSerializer})
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str) -> Response:
        """End the session with an optional reward and metadata; its key stops working."""
        form = RecordingCloseSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            session = recording.recording_session_close(
                session=_own(request, self.get_object()), **form.validated_data
            )
        except recording.RecordingError as exc:
            raise _invalid(exc) from None
        return Response(RecordingSerializer(session).data)

    @extend_schema(request=None, responses={200: RecordingSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        """Refuse the key from now on; what was recorded stays."""
        session = recording.recording_session_revoke(session=_own(request, self.get_object()))
        return Response(RecordingSerializer(session).data)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "mode",
                OpenApiTypes.STR,
                enum=list(selectors_recording.MODES),
                description="reconstruction strategy: prefix_merge (default) or per_request; "
                "prefix and request are aliases",
            )
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def trajectory(self, request: Request, pk: str) -> Response:
        """Chains per agent with token ids, loss masks and logprobs, and every break."""
        mode = request.query_params.get("mode", PREFIX_MERGE)
        if mode not in selectors_recording.MODES:
            choices = ", ".join(selectors_recording.MODES)
            raise ValidationError({"mode": [f"{mode!r} is not one of {choices}"]})
        session = self.get_object()
        return Response(selectors_recording.recording_trajectory(session=session, mode=mode))

    @extend_schema(
        parameters=[
            OpenApiParameter("task", OpenApiTypes.STR, description="only this task's sessions"),
            OpenApiParameter(
                "session", OpenApiTypes.INT, many=True, description="only these sessions"
            ),
            OpenApiParameter("substeps", OpenApiTypes.INT, description="trainer substeps"),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=False, methods=["get"])
    def report(self, request: Request) -> Response:
        """Prefix merging against per-request reconstruction on the chosen sessions:
        sequences, tokens processed, trained tokens and trainer updates (Polar Fig. 5b)."""
        sessions = self.get_queryset()
        task = request.query_params.get("task")
        if task is not None:
            sessions = sessions.filter(task=task)
        ids = request.query_params.getlist("session")
        if ids:
            bad = [i for i in ids if as_id(i) is None]
            if bad:
                raise ValidationError({"session": [id_problem(bad[0])]})
            sessions = sessions.filter(pk__in=[as_id(i) for i in ids])
        substeps = request.query_params.get("substeps", "1")
        if not substeps.isdigit() or not 1 <= int(substeps) <= 1000:
            raise ValidationError(
                {"substeps": [f"{substeps!r} is not a whole number from 1 to 1000"]}
            )
        shape = TrainerShape(substeps=int(substeps))
        report = selectors_recording.recording_report(sessions=sessions, shape=shape)
        return Response(report.to_json())
