"""/api/rl-jobs/: researchers launch and cancel RL jobs; everyone follows their steps and
versions. The create's input (types only), the job's row, and its detail with steps and
versions."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from rest_framework import serializers
from rest_framework.request import Request

from harness_app.models import Benchmark, PolicyConfig
from harness_app.serializers import RowIdField
from training import selectors
from training.api.jobs import TrainingJobViewSet
from training.models import PolicyVersion, RLAlgorithm, RLJob, RLStep, SFTJob
from training.rl.settings import PRESETS, RLJobSettings
from training.services import rl_jobs
from trajectories.models import TerminationPolicy

RL_DEFAULTS = RLJobSettings()


class RLJobCreateSerializer(serializers.Serializer[Any]):
    """Types only: ranges and the set-up (a vLLM policy, the weights on disk, the train
    extra) are checked by rl_jobs.rl_job_create, which names what it refuses."""

    name = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
    benchmark = RowIdField(queryset=Benchmark.objects.all())
    warm_start = RowIdField(
        queryset=SFTJob.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="a completed SFT job to start from: its policy, weights folder, LoRA rank "
        "and targets replace base_policy, base_model_dir, lora_rank and lora_targets",
    )
    base_policy = RowIdField(
        queryset=PolicyConfig.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="required unless warm_start is given",
    )
    base_model_dir = serializers.CharField(
        required=False,
        default="",
        help_text="local folder of the weights the base policy's vLLM server serves "
        "(required unless warm_start is given)",
    )
    steps = serializers.IntegerField(default=RL_DEFAULTS.steps)
    group_size = serializers.IntegerField(default=RL_DEFAULTS.group_size, help_text="G, 2 to 64")
    queries_per_step = serializers.IntegerField(default=RL_DEFAULTS.queries_per_step)
    algorithm = serializers.ChoiceField(choices=RLAlgorithm.choices, default=RL_DEFAULTS.algorithm)
    cispo_eps_low = serializers.FloatField(default=RL_DEFAULTS.cispo_eps_low)
    cispo_eps_high = serializers.FloatField(default=RL_DEFAULTS.cispo_eps_high)
    grpo_eps = serializers.FloatField(default=RL_DEFAULTS.grpo_eps)
    learning_rate = serializers.FloatField(default=RL_DEFAULTS.learning_rate)
    lora_rank = serializers.IntegerField(default=RL_DEFAULTS.lora_rank)
    kl_beta = serializers.FloatField(default=RL_DEFAULTS.kl_beta)
    normalize_std = serializers.BooleanField(default=RL_DEFAULTS.normalize_std)
    reward_weights = serializers.DictField(
        default=dict,
        help_text='weight overrides; {"preset": "harness1"} starts from a named preset',
    )
    max_turns = serializers.IntegerField(default=RL_DEFAULTS.max_turns)
    termination_policy = serializers.ChoiceField(
        choices=TerminationPolicy.choices, default=RL_DEFAULTS.termination_policy
    )
    preset = serializers.ChoiceField(
        choices=sorted(PRESETS),
        required=False,
        allow_blank=True,
        default="",
        help_text="a named recipe filling every setting the request does not give "
        '("harness1_gpu": Harness-1 on a GPU)',
    )
    substeps = serializers.IntegerField(
        default=RL_DEFAULTS.substeps, help_text="optimiser steps per batch, over minibatches"
    )
    lora_targets = serializers.ListField(
        child=serializers.CharField(), default=lambda: list(RL_DEFAULTS.lora_targets)
    )
    tokens_per_turn = serializers.IntegerField(
        required=False, allow_null=True, default=None, help_text="max_tokens per model call"
    )
    temperature = serializers.FloatField(required=False, allow_null=True, default=None)
    max_sequence_tokens = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="longer trajectories are left out of training",
    )
    gradient_checkpointing = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="null: on for CUDA only"
    )
    reconstruction = serializers.CharField(
        default=RL_DEFAULTS.reconstruction,
        help_text="model calls as one sequence per chain (prefix_merge) or per call (per_request)",
    )
    mode = serializers.CharField(
        default=RL_DEFAULTS.mode,
        help_text="sync, or async: step n+1's rollouts run while step n trains",
    )


class PolicyVersionSerializer(serializers.ModelSerializer[PolicyVersion]):
    model = serializers.CharField(source="policy.model", read_only=True)
    policy: serializers.PrimaryKeyRelatedField[PolicyConfig] = RowIdField(read_only=True)

    class Meta:
        model = PolicyVersion
        fields = ["number", "policy", "model", "adapter_path", "trained_at_step", "created_at"]
        read_only_fields = fields


class RLStepSerializer(serializers.ModelSerializer[RLStep]):
    version = serializers.IntegerField(source="version.number", read_only=True)
    produced = serializers.IntegerField(source="produced.number", default=None, read_only=True)
    batch: serializers.PrimaryKeyRelatedField[Any] = RowIdField(read_only=True)

    class Meta:
        model = RLStep
        fields = [
            "index",
            "status",
            "version",
            "batch",
            "produced",
            "metrics",
            "timings",
            "error",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class RLJobSerializer(serializers.ModelSerializer[RLJob]):
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="steps done / steps, 0 to 1", read_only=True)

    class Meta:
        model = RLJob
        fields = [
            "id",
            "name",
            "status",
            "progress",
            "steps_done",
            "steps",
            "benchmark",
            "warm_start",
            "base_policy",
            "base_model_dir",
            "group_size",
            "queries_per_step",
            "algorithm",
            "cispo_eps_low",
            "cispo_eps_high",
            "grpo_eps",
            "learning_rate",
            "lora_rank",
            "kl_beta",
            "normalize_std",
            "reward_weights",
            "max_turns",
            "termination_policy",
            "preset",
            "substeps",
            "lora_targets",
            "tokens_per_turn",
            "temperature",
            "max_sequence_tokens",
            "gradient_checkpointing",
            "reconstruction",
            "mode",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class RLJobDetailSerializer(RLJobSerializer):
    step_rows = RLStepSerializer(many=True, read_only=True)
    versions = PolicyVersionSerializer(many=True, read_only=True)

    class Meta(RLJobSerializer.Meta):
        fields = [*RLJobSerializer.Meta.fields, "versions", "step_rows"]
        read_only_fields = fields


class RLJobViewSet(TrainingJobViewSet[RLJob]):
    """RL jobs: researchers launch and cancel them; everyone follows their steps."""

    input_serializer = RLJobCreateSerializer
    output_serializer = RLJobSerializer
    detail_serializer = RLJobDetailSerializer
    create_doc = "Check and queue the job; its steps run on the training queue."
    cancel_doc = "Stop the job after the piece of work in flight; its running batch is cancelled."

    def get_queryset(self) -> QuerySet[RLJob]:
        queryset = selectors.rl_jobs_queryset()
        if self.action == "retrieve":
            steps = RLStep.objects.select_related("version", "produced").order_by("index")
            queryset = queryset.prefetch_related(
                Prefetch("step_rows", queryset=steps), "versions__policy"
            )
        return queryset

    def job_create(self, request: Request, data: dict[str, Any], **common: Any) -> RLJob:
        return rl_jobs.rl_job_create(
            benchmark=data.pop("benchmark"),
            warm_start=data.pop("warm_start"),
            job_settings=rl_jobs.job_settings_from(data, given=set(request.data)),
            **common,
        )

    def job_cancel(self, job: RLJob) -> None:
        rl_jobs.rl_job_cancel(job=job)
