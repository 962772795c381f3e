"""API input and output shapes for SFT exports, SFT jobs and RL jobs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from harness_app.harness.llm.reconstruct import PREFIX_MERGE, STRATEGIES, STRATEGY_ALIASES
from harness_app.models import Benchmark, PolicyConfig
from harness_app.serializers import RowIdField
from training.models import (
    DeliveryState,
    ExportFormat,
    ExportStatus,
    PolicyVersion,
    RLAlgorithm,
    RLJob,
    RLStep,
    RolloutRequest,
    RolloutRequestStatus,
    SFTExport,
    SFTJob,
)
from training.selectors import rollout_request_counts, rollout_request_reason
from training.services import rollout_service as svc
from training.services.rl_job_settings import PRESETS, RLJobSettings
from training.services.sft_job_settings import (
    SFTJobSettings,
    sft_lora_alpha_default,
    sft_lora_rank_default,
)
from trajectories.models import TerminationPolicy

RL_DEFAULTS = RLJobSettings()
# The longest a pull may wait for a group: it holds a web worker meanwhile.
MAX_PULL_WAIT_S = 20.0
RECONSTRUCTION_NAMES = (*STRATEGIES, *STRATEGY_ALIASES)


class ExportCreateSerializer(serializers.Serializer[Any]):
    format = serializers.ChoiceField(choices=ExportFormat.choices, default=ExportFormat.CHAT)
    reconstruction = serializers.ChoiceField(
        choices=list(RECONSTRUCTION_NAMES),
        default=PREFIX_MERGE,
        help_text="model calls as one record per chain (prefix_merge) or per call "
        "(per_request); prefix and request are aliases",
    )
    filters = serializers.DictField(
        default=dict,
        help_text="episode filters as for /api/episodes/; without annotation_status, "
        "only approved episodes are exported",
    )


class ExportSerializer(serializers.ModelSerializer[SFTExport]):
    format = serializers.CharField(source="fmt", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    download = serializers.SerializerMethodField()

    class Meta:
        model = SFTExport
        fields = [
            "id",
            "status",
            "format",
            "reconstruction",
            "filters",
            "episodes",
            "records",
            "skipped",
            "manifest",
            "error",
            "download",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_download(self, export: SFTExport) -> str | None:
        """Where the JSONL can be fetched once the export is done."""
        if export.status != ExportStatus.DONE:
            return None
        request = self.context.get("request")
        path = f"/api/exports/{export.pk}/download/"
        return request.build_absolute_uri(path) if request is not None else path


# --- RL jobs ---------------------------------------------------------------------------------


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


# --- SFT jobs --------------------------------------------------------------------------------

SFT_DEFAULTS = SFTJobSettings()


class SFTJobCreateSerializer(serializers.Serializer[Any]):
    """Types only: ranges and the set-up (a done, non-empty export; a vLLM policy; the
    weights on disk) are checked by sft_jobs.sft_job_create, which names what it refuses."""

    name = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
    export = RowIdField(queryset=SFTExport.objects.all())
    base_policy = RowIdField(
        queryset=PolicyConfig.objects.all(),
        help_text="the student: the OpenAI-compatible policy whose vLLM server serves the adapter",
    )
    base_model_dir = serializers.CharField(
        help_text="local folder of the weights the base policy's vLLM server serves"
    )
    lora_rank = serializers.IntegerField(
        default=sft_lora_rank_default,
        help_text="default: 32 (Harness-1), or the vLLM server's largest (LLM_MAX_LORA_RANK) "
        "when that is less",
    )
    lora_alpha = serializers.IntegerField(
        default=sft_lora_alpha_default, help_text="default: twice the default rank"
    )
    lora_dropout = serializers.FloatField(default=SFT_DEFAULTS.lora_dropout)
    lora_targets = serializers.ListField(
        child=serializers.CharField(), default=lambda: list(SFT_DEFAULTS.lora_targets)
    )
    learning_rate = serializers.FloatField(default=SFT_DEFAULTS.learning_rate)
    epochs = serializers.FloatField(default=SFT_DEFAULTS.epochs)
    max_length = serializers.IntegerField(
        default=SFT_DEFAULTS.max_length, help_text="tokens per record; longer ones are truncated"
    )
    batch_size = serializers.IntegerField(default=SFT_DEFAULTS.batch_size)
    grad_accum = serializers.IntegerField(default=SFT_DEFAULTS.grad_accum)
    eval_fraction = serializers.FloatField(
        default=SFT_DEFAULTS.eval_fraction, help_text="held-out share of the episodes"
    )
    seed = serializers.IntegerField(default=SFT_DEFAULTS.seed)
    gradient_checkpointing = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="null: on for CUDA only"
    )
    save_steps = serializers.IntegerField(default=SFT_DEFAULTS.save_steps)
    eval_steps = serializers.IntegerField(default=SFT_DEFAULTS.eval_steps)


class SFTJobSerializer(serializers.ModelSerializer[SFTJob]):
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="steps done / total steps, 0 to 1", read_only=True)
    model = serializers.CharField(
        source="policy.model", default=None, read_only=True, help_text="the served adapter"
    )

    class Meta:
        model = SFTJob
        fields = [
            "id",
            "name",
            "status",
            "progress",
            "step",
            "total_steps",
            "cancel_requested",
            "export",
            "base_policy",
            "base_model_dir",
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
            "lora_targets",
            "learning_rate",
            "epochs",
            "max_length",
            "batch_size",
            "grad_accum",
            "eval_fraction",
            "seed",
            "gradient_checkpointing",
            "save_steps",
            "eval_steps",
            "metrics",
            "policy",
            "model",
            "adapter_path",
            "checkpoint_path",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class SFTJobDetailSerializer(SFTJobSerializer):
    """With the per-step history (train and eval loss) and the trainer's manifest."""

    class Meta(SFTJobSerializer.Meta):
        fields = [*SFTJobSerializer.Meta.fields, "manifest", "history", "output_dir"]
        read_only_fields = fields


# --- the rollout service ---------------------------------------------------------------------


class RolloutRequestCreateSerializer(serializers.Serializer[Any]):
    """Types only: ranges and the query selection are checked by
    rollout_service.rollout_request_create, which names what it refuses."""

    benchmark = RowIdField(queryset=Benchmark.objects.all())
    policy = RowIdField(
        queryset=PolicyConfig.objects.all(),
        help_text="the policy config to sample from (a served adapter is one: an RL policy "
        "version's or an SFT job's)",
    )
    policy_version = serializers.IntegerField(
        default=0, help_text="the trainer's number for this policy; staleness counts from it"
    )
    group_size = serializers.IntegerField(
        help_text=f"episodes per group, 2 to {svc.MAX_GROUP_SIZE}"
    )
    groups_wanted = serializers.IntegerField(help_text="groups the trainer will acknowledge")
    over_sample = serializers.FloatField(
        default=1.0,
        help_text=f"launch ceil(groups_wanted x this) groups, {svc.MIN_OVER_SAMPLE} to "
        f"{svc.MAX_OVER_SAMPLE}; the extra ones are cancelled once enough are delivered",
    )
    staleness_bound = serializers.IntegerField(
        default=0,
        help_text="a group sampled more than this many versions behind the version a "
        "trainer pulls with is dropped as stale",
    )
    lease_s = serializers.IntegerField(
        default=300, help_text="seconds a pulled group waits for its ack before redelivery"
    )
    sampling = serializers.DictField(
        default=dict, help_text="overrides of the policy's sampling (temperature, top_p, ...)"
    )
    query_ids = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        allow_null=True,
        default=None,
        help_text="the queries (pks of the benchmark) to draw groups from, in order; "
        "default: the benchmark's, in order",
    )
    max_turns = serializers.IntegerField(default=40)
    normalize_std = serializers.BooleanField(
        default=False, help_text="divide advantages by the group's reward std (GRPO)"
    )
    reconstruction = serializers.ChoiceField(choices=list(STRATEGIES), default=PREFIX_MERGE)


class RolloutCountsSerializer(serializers.Serializer[Any]):
    playing = serializers.IntegerField()
    ready = serializers.IntegerField()
    leased = serializers.IntegerField()
    acked = serializers.IntegerField()
    zero_variance = serializers.IntegerField()
    stale = serializers.IntegerField()
    straggler = serializers.IntegerField()
    failed = serializers.IntegerField()


REASON_HELP = (
    "why the request finished (satisfied, exhausted or cancelled) and how many groups "
    "were acknowledged or dropped; empty while open"
)


class RolloutRequestSerializer(serializers.ModelSerializer[RolloutRequest]):
    counts = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField(help_text=REASON_HELP)

    class Meta:
        model = RolloutRequest
        fields = [
            "id",
            "status",
            "benchmark",
            "policy",
            "policy_version",
            "batch",
            "group_size",
            "groups_wanted",
            "over_sample",
            "groups_launched",
            "staleness_bound",
            "lease_s",
            "sampling",
            "normalize_std",
            "reconstruction",
            "counts",
            "reason",
            "created_at",
            "finished_at",
        ]

    @extend_schema_field(RolloutCountsSerializer)
    def get_counts(self, request: RolloutRequest) -> dict[str, int]:
        # The list's queryset annotates the counts (rollout_requests_queryset); a request
        # fresh from a service does not carry them.
        if hasattr(request, "n_playing"):
            return {state: getattr(request, f"n_{state}") for state in DeliveryState.values}
        return rollout_request_counts(request_id=request.pk)

    def get_reason(self, request: RolloutRequest) -> str:
        return rollout_request_reason(
            status=request.status,
            groups_wanted=request.groups_wanted,
            counts=self.get_counts(request),
        )


class RolloutPullSerializer(serializers.Serializer[Any]):
    policy_version = serializers.IntegerField(
        help_text="the trainer's current policy version (for the staleness bound)"
    )
    max_groups = serializers.IntegerField(default=1, help_text=f"1 to {svc.MAX_PULL}")
    consumer = serializers.CharField(
        default="", allow_blank=True, max_length=200, help_text="a name for logs and the admin"
    )
    wait_s = serializers.FloatField(
        default=0.0,
        min_value=0.0,
        max_value=MAX_PULL_WAIT_S,
        help_text="wait up to this long for a group when none is ready (long polling)",
    )


class RolloutSampleSerializer(serializers.Serializer[Any]):
    """One token-faithful sequence (training/rl/batches.py TrainSequence)."""

    sample_id = serializers.CharField()
    group_id = serializers.IntegerField()
    episode_id = serializers.IntegerField()
    segment_idx = serializers.IntegerField()
    policy_version = serializers.CharField(help_text="the model name the calls were sampled from")
    prompt_ids = serializers.ListField(child=serializers.IntegerField())
    response_ids = serializers.ListField(child=serializers.IntegerField())
    loss_mask = serializers.ListField(
        child=serializers.IntegerField(), help_text="1 on sampled tokens, aligned with response_ids"
    )
    rollout_logprobs = serializers.ListField(child=serializers.FloatField())
    reward = serializers.FloatField()
    advantage = serializers.FloatField()
    termination_reason = serializers.CharField()


class RolloutEpisodeSerializer(serializers.Serializer[Any]):
    episode_id = serializers.IntegerField()
    reward = serializers.FloatField(allow_null=True)
    advantage = serializers.FloatField(allow_null=True)
    excluded = serializers.CharField(help_text="why it has no samples; empty when it has")


class RolloutGroupSerializer(serializers.Serializer[Any]):
    delivery = serializers.IntegerField()
    lease = serializers.UUIDField(help_text="acknowledge the group with this")
    lease_expires_at = serializers.DateTimeField()
    group = serializers.IntegerField()
    query = serializers.CharField(help_text="the query's id in its benchmark")
    policy_version = serializers.IntegerField()
    times_delivered = serializers.IntegerField(help_text="above 1: a redelivery")
    rewards = serializers.ListField(child=serializers.FloatField())
    advantages = serializers.ListField(child=serializers.FloatField())
    episodes = RolloutEpisodeSerializer(many=True)
    samples = RolloutSampleSerializer(many=True)


class RolloutPullResultSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=RolloutRequestStatus.choices)
    groups = RolloutGroupSerializer(many=True)
    counts = RolloutCountsSerializer()
    reason = serializers.CharField(help_text=REASON_HELP)


class RolloutAckSerializer(serializers.Serializer[Any]):
    lease = serializers.CharField(help_text="the lease token of a pulled group")


class RolloutAckResultSerializer(serializers.Serializer[Any]):
    delivery = serializers.IntegerField()
    already_acked = serializers.BooleanField()
    status = serializers.ChoiceField(choices=RolloutRequestStatus.choices)
    reason = serializers.CharField(help_text=REASON_HELP)
