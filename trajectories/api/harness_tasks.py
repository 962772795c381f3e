"""The API for harness tasks and groups (docs/proxy.md, "Harness tasks").

Researchers create tasks and launch groups: a group runs shell commands an agent chose and
spends model-server time, like a rollout batch. Anyone with a role reads them. A group's
detail has its runs with rewards and the GRPO advantages RL would train with.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import NOT_QUEUED_ANSWER, ResearcherWrites, not_queued, request_user
from harness_app.ids import as_id, id_problem
from harness_app.serializers import RowIdField
from trajectories.agent_clis import CLI_KINDS
from trajectories.models import HarnessGroup, HarnessRunStatus, HarnessTask
from trajectories.selectors import harness_tasks as selectors
from trajectories.services import harness_runs
from trajectories.services.harness_runs import HarnessTaskError


def _invalid(exc: HarnessTaskError) -> ValidationError:
    return ValidationError({exc.field: [str(exc)]})


class HarnessTaskSerializer(serializers.ModelSerializer[HarnessTask]):
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    files = serializers.JSONField(help_text="{relative path: text}: the repository")

    class Meta:
        model = HarnessTask
        fields = [
            "id",
            "name",
            "instruction",
            "files",
            "eval_command",
            "timeout_s",
            "eval_timeout_s",
            "created_by",
            "created_at",
        ]
        read_only_fields = ["id", "created_by", "created_at"]


class HarnessTaskViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[HarnessTask],
):
    """Harness tasks: a repository, an instruction and an evaluation command."""

    permission_classes = [ResearcherWrites]
    serializer_class = HarnessTaskSerializer

    def get_queryset(self) -> QuerySet[HarnessTask]:
        return selectors.harness_tasks()

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A new task; paths must be relative, without '..' or '.git', within size limits."""
        form = HarnessTaskSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            task = harness_runs.harness_task_create(
                created_by=request_user(request), **form.validated_data
            )
        except HarnessTaskError as exc:
            raise _invalid(exc) from None
        return Response(HarnessTaskSerializer(task).data, status=status.HTTP_201_CREATED)


class HarnessGroupLaunchSerializer(serializers.Serializer[Any]):
    task = RowIdField(queryset=HarnessTask.objects.all())
    kind = serializers.ChoiceField(choices=CLI_KINDS, help_text="the harness")
    command = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="the argv, for kind 'command'; the instruction is added as its last argument",
    )
    model = serializers.CharField(max_length=200, help_text="the model name the CLI is told")
    size = serializers.IntegerField(help_text="N: how many runs form the group")
    sampling = serializers.JSONField(
        required=False, default=dict, help_text="the proxy's sampling overrides for every call"
    )


class HarnessRunSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(source="run.pk")
    index = serializers.IntegerField(source="run.index")
    status = serializers.ChoiceField(source="run.status", choices=HarnessRunStatus.choices)
    session = serializers.IntegerField(source="run.session_id")
    episode = serializers.IntegerField(source="run.session.episode_id")
    exit_code = serializers.IntegerField(source="run.exit_code", allow_null=True)
    eval_exit_code = serializers.IntegerField(source="run.eval_exit_code", allow_null=True)
    reward = serializers.FloatField(source="run.reward", allow_null=True)
    advantage = serializers.FloatField(allow_null=True)
    excluded = serializers.CharField(help_text="why RL leaves the run out; empty when it does not")
    calls = serializers.IntegerField(source="run.session.episode.turns")
    seconds = serializers.FloatField(source="run.seconds", allow_null=True)
    error = serializers.CharField(source="run.error")
    started_at = serializers.DateTimeField(source="run.started_at", allow_null=True)
    finished_at = serializers.DateTimeField(source="run.finished_at", allow_null=True)


class HarnessGroupSerializer(serializers.ModelSerializer[HarnessGroup]):
    task_name = serializers.CharField(source="task.name", read_only=True)
    task_key = serializers.CharField(read_only=True, help_text="the sessions' RL group key")
    runs_finished = serializers.IntegerField(read_only=True)
    reward_mean = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = HarnessGroup
        fields = [
            "id",
            "task",
            "task_name",
            "kind",
            "command",
            "model",
            "sampling",
            "size",
            "status",
            "task_key",
            "runs_finished",
            "reward_mean",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class HarnessGroupDetailSerializer(HarnessGroupSerializer):
    runs = serializers.SerializerMethodField()
    advantages_dropped = serializers.SerializerMethodField(
        help_text="true when every trainable run scored the same: no GRPO signal"
    )

    class Meta(HarnessGroupSerializer.Meta):
        fields = [*HarnessGroupSerializer.Meta.fields, "advantages_dropped", "runs"]
        read_only_fields = fields

    def _view(self, group: HarnessGroup) -> selectors.GroupAdvantages:
        cached = self.context.setdefault("views", {})
        if group.pk not in cached:
            cached[group.pk] = selectors.harness_group_view(group=group)
        return cached[group.pk]

    def get_runs(self, group: HarnessGroup) -> list[dict[str, Any]]:
        return HarnessRunSerializer(self._view(group).rows, many=True).data  # type: ignore[return-value]

    def get_advantages_dropped(self, group: HarnessGroup) -> bool:
        return self._view(group).dropped


class HarnessGroupViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[HarnessGroup]
):
    """Harness groups: N runs of one task by one harness, one GRPO group."""

    permission_classes = [ResearcherWrites]

    def get_queryset(self) -> QuerySet[HarnessGroup]:
        groups = selectors.harness_groups()
        task = self.request.query_params.get("task")
        if not task:
            return groups
        task_id = as_id(task)
        if task_id is None:
            raise ValidationError({"task": [id_problem(task)]})
        return groups.filter(task_id=task_id)

    def get_serializer_class(self) -> type[serializers.BaseSerializer[HarnessGroup]]:
        return HarnessGroupDetailSerializer if self.action == "retrieve" else HarnessGroupSerializer

    @extend_schema(
        request=HarnessGroupLaunchSerializer,
        responses={201: HarnessGroupSerializer, 503: NOT_QUEUED_ANSWER},
    )
    def create(self, request: Request) -> Response:
        """Launch N runs of the task: each gets a recording session and a worker task."""
        form = HarnessGroupLaunchSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            group = harness_runs.harness_group_launch(
                created_by=request_user(request), **form.validated_data
            )
        except HarnessTaskError as exc:
            raise _invalid(exc) from None
        fresh = self.get_queryset().get(pk=group.pk)
        body = HarnessGroupDetailSerializer(fresh).data
        # Each run is a job sent on its own: the first tells whether the broker took them.
        first = group.runs.order_by("index").first()
        refused = not_queued(first, body) if first is not None else None
        return refused or Response(body, status=status.HTTP_201_CREATED)
