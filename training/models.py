"""SFT exports (immutable JSONL snapshots of annotated episodes, with their provenance),
SFT jobs (a LoRA adapter trained on an export, served by vLLM as a policy) and RL jobs
(steps of rollouts → advantages → a trainer step → a new policy version served by vLLM)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from harness_app import queues
from harness_app.jobs import Job
from trajectories.models import TerminationPolicy


class ExportStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ExportFormat(models.TextChoices):
    CHAT = "chat", "Chat messages with tools (OpenAI format)"
    TOKENS = "tokens", "Token ids with loss labels"


class Reconstruction(models.TextChoices):
    """harness.llm.reconstruct.STRATEGIES, as a field's choices."""

    PREFIX_MERGE = "prefix_merge", "Prefix merging: one sequence per chain of calls"
    PER_REQUEST = "per_request", "Per request: one sequence per call"


class SFTExport(Job):
    """One export. Once done, its file and rows are never rewritten: a new export is a
    new row and a new file (training/services/sft_exports.py refuses to run a finished one
    again)."""

    filters = models.JSONField(default=dict, help_text="episode filters, as checked")
    fmt = models.CharField(max_length=10, choices=ExportFormat.choices, default=ExportFormat.CHAT)
    reconstruction = models.CharField(
        max_length=20,
        choices=Reconstruction.choices,
        default=Reconstruction.PREFIX_MERGE,
        help_text="how model calls become records: one per chain, or one per call",
    )
    status = models.CharField(
        max_length=10, choices=ExportStatus.choices, default=ExportStatus.QUEUED
    )
    episodes = models.PositiveIntegerField(default=0)
    records = models.PositiveIntegerField(default=0, help_text="JSONL lines written")
    skipped = models.PositiveIntegerField(default=0, help_text="matched but not exportable")
    manifest = models.JSONField(default=dict)
    file_path = models.CharField(max_length=500, blank=True)

    TASK = queues.SFT_EXPORT

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"SFT export {self.pk} ({self.fmt}, {self.status})"


class SFTExportEpisode(models.Model):
    """Provenance: which episodes an export holds, on which lines, with each line's hash."""

    export = models.ForeignKey(SFTExport, on_delete=models.CASCADE, related_name="items")
    # PROTECT: an exported episode is evidence of what a model was trained on.
    episode = models.ForeignKey(
        "trajectories.Episode", on_delete=models.PROTECT, related_name="sft_exports"
    )
    first_line = models.PositiveIntegerField(help_text="0-based line of its first record")
    records = models.PositiveIntegerField(default=1)
    sha256 = models.CharField(max_length=64, help_text="of the episode's lines, newline-joined")

    class Meta:
        ordering = ["export", "first_line"]
        constraints = [
            models.UniqueConstraint(fields=["export", "episode"], name="sft_export_unique_episode")
        ]

    def __str__(self) -> str:
        return f"episode {self.episode_id} in export {self.export_id}"


# --- SFT jobs --------------------------------------------------------------------------------


class SFTJobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


SFT_JOB_FINISHED = (SFTJobStatus.COMPLETED, SFTJobStatus.FAILED, SFTJobStatus.CANCELLED)


class SFTJob(models.Model):
    """LoRA supervised fine-tuning on one export's approved trajectories.

    The trainer (training/sft_train.py) loads `base_model_dir`, the weights the vLLM server
    behind `base_policy` serves; the finished adapter is loaded into that server and
    becomes `policy`, which rollouts and RL jobs (`warm_start`) can use."""

    name = models.CharField(max_length=200, blank=True)
    export = models.ForeignKey(SFTExport, on_delete=models.PROTECT, related_name="sft_jobs")
    base_policy = models.ForeignKey(
        "harness_app.PolicyConfig", on_delete=models.PROTECT, related_name="sft_jobs"
    )
    base_model_dir = models.CharField(max_length=500, help_text="local folder of the base model")
    # The trainer's settings (training.sft_train.SFTSettings), defaults from Harness-1.
    lora_rank = models.PositiveSmallIntegerField(default=32)
    lora_alpha = models.PositiveSmallIntegerField(default=64)
    lora_dropout = models.FloatField(default=0.0)
    lora_targets = models.JSONField(default=list, help_text="module names LoRA adapts")
    learning_rate = models.FloatField(default=1e-4)
    epochs = models.FloatField(default=3.0)
    max_length = models.PositiveIntegerField(
        default=4096, help_text="tokens per record; longer records are truncated"
    )
    batch_size = models.PositiveSmallIntegerField(default=1)
    grad_accum = models.PositiveSmallIntegerField(default=1)
    eval_fraction = models.FloatField(
        default=0.1, help_text="share of the episodes held out for the eval loss"
    )
    seed = models.IntegerField(default=0)
    gradient_checkpointing = models.BooleanField(
        null=True, blank=True, help_text="blank: on for CUDA, off on the CPU"
    )
    save_steps = models.PositiveIntegerField(default=50, help_text="a checkpoint every N steps")
    eval_steps = models.PositiveIntegerField(default=10, help_text="the eval loss every N steps")
    status = models.CharField(
        max_length=12, choices=SFTJobStatus.choices, default=SFTJobStatus.QUEUED
    )
    cancel_requested = models.BooleanField(default=False)
    attempt = models.PositiveIntegerField(
        default=0, help_text="runs started; only the newest run's writes land"
    )
    step = models.PositiveIntegerField(default=0, help_text="optimiser steps done")
    total_steps = models.PositiveIntegerField(default=0)
    history = models.JSONField(
        default=list,
        help_text="per logged step: step, epoch, loss, eval_loss, learning_rate, tokens_per_s",
    )
    metrics = models.JSONField(default=dict)
    manifest = models.JSONField(default=dict, help_text="what the trainer read, and how")
    output_dir = models.CharField(max_length=500, blank=True)
    adapter_path = models.CharField(max_length=500, blank=True)
    checkpoint_path = models.CharField(
        max_length=500, blank=True, help_text="the newest checkpoint, to resume from"
    )
    policy = models.ForeignKey(
        "harness_app.PolicyConfig",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="trained_by_sft_jobs",
        help_text="the published adapter",
    )
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name or f"SFT job {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in SFT_JOB_FINISHED

    @property
    def progress(self) -> float:
        if self.status == SFTJobStatus.COMPLETED:
            return 1.0
        return min(self.step / self.total_steps, 1.0) if self.total_steps else 0.0

    @property
    def can_resume(self) -> bool:
        """Stopped with a checkpoint, and not after training finished (a job whose trained
        adapter its server refused is published again, not trained again)."""
        stopped = self.status in (SFTJobStatus.CANCELLED, SFTJobStatus.FAILED)
        return stopped and bool(self.checkpoint_path) and not self.adapter_path


# --- RL jobs ---------------------------------------------------------------------------------


class RLJobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class RLAlgorithm(models.TextChoices):
    CISPO = "cispo", "CISPO (clipped importance-sampling weight)"
    GRPO = "grpo", "GRPO (clipped ratio)"


class RLMode(models.TextChoices):
    SYNC = "sync", "Sync: each step samples from the newest version"
    ASYNC = "async", "Async: a step's rollouts run while the previous step trains"


class RLStepStatus(models.TextChoices):
    ROLLOUT = "rollout", "Sampling rollouts"
    TRAINING = "training", "Training"
    DONE = "done", "Done"
    SKIPPED = "skipped", "Done, nothing to train on"
    FAILED = "failed", "Failed"


RL_JOB_FINISHED = (RLJobStatus.COMPLETED, RLJobStatus.FAILED, RLJobStatus.CANCELLED)


class RLJob(models.Model):
    """A run of on-policy RL: each step samples groups from the newest policy version,
    trains one optimiser step on them and serves the result as the next version.

    The trainer loads `base_model_dir`, the same weights the vLLM server behind
    `base_policy` serves, so the sampler's and the trainer's logprobs agree."""

    name = models.CharField(max_length=200, blank=True)
    benchmark = models.ForeignKey("harness_app.Benchmark", on_delete=models.PROTECT)
    base_policy = models.ForeignKey(
        "harness_app.PolicyConfig", on_delete=models.PROTECT, related_name="rl_jobs"
    )
    base_model_dir = models.CharField(max_length=500, help_text="local folder of the base model")
    group_size = models.PositiveIntegerField(default=4, help_text="G: samples per query")
    queries_per_step = models.PositiveIntegerField(default=4)
    steps = models.PositiveIntegerField(default=2)
    algorithm = models.CharField(
        max_length=10, choices=RLAlgorithm.choices, default=RLAlgorithm.CISPO
    )
    # CISPO clips its weight to [1 - eps_low, 1 + eps_high]; GRPO its ratio to 1 ± grpo_eps.
    cispo_eps_low = models.FloatField(default=1.0)
    cispo_eps_high = models.FloatField(default=4.0)
    grpo_eps = models.FloatField(default=0.2)
    learning_rate = models.FloatField(default=1e-5)
    lora_rank = models.PositiveSmallIntegerField(default=8)
    kl_beta = models.FloatField(default=0.0)
    normalize_std = models.BooleanField(default=False)
    reward_weights = models.JSONField(default=dict)
    max_turns = models.PositiveIntegerField(default=8)
    termination_policy = models.CharField(
        max_length=20, choices=TerminationPolicy.choices, default=TerminationPolicy.MAX_TURNS
    )
    substeps = models.PositiveSmallIntegerField(
        default=1, help_text="optimiser steps per batch, one per minibatch"
    )
    lora_targets = models.JSONField(default=list, help_text="module names LoRA adapts")
    tokens_per_turn = models.PositiveIntegerField(
        null=True, blank=True, help_text="max_tokens per model call; blank: the policy's own"
    )
    temperature = models.FloatField(
        null=True, blank=True, help_text="sampling temperature; blank: the policy's own"
    )
    max_sequence_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="longer trajectories are dropped from training"
    )
    gradient_checkpointing = models.BooleanField(
        null=True, blank=True, help_text="blank: on for CUDA, off on the CPU"
    )
    preset = models.CharField(max_length=40, blank=True, help_text="the named recipe used")
    reconstruction = models.CharField(
        max_length=20,
        choices=Reconstruction.choices,
        default=Reconstruction.PREFIX_MERGE,
        help_text="how model calls become sequences: one per chain, or one per call",
    )
    mode = models.CharField(
        max_length=10,
        choices=RLMode.choices,
        default=RLMode.SYNC,
        help_text="async: step n+1 samples from the previous version while step n trains",
    )
    warm_start = models.ForeignKey(
        SFTJob,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="rl_jobs",
        help_text="the SFT job whose adapter version 0 is",
    )
    status = models.CharField(
        max_length=12, choices=RLJobStatus.choices, default=RLJobStatus.QUEUED
    )
    steps_done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name or f"RL job {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in RL_JOB_FINISHED

    @property
    def progress(self) -> float:
        return self.steps_done / self.steps if self.steps else 0.0


class PolicyVersion(models.Model):
    """One policy an RL job sampled from: version 0 is the base policy, version n the
    LoRA adapter trained at step n - 1, served by vLLM under its own model name."""

    job = models.ForeignKey(RLJob, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    policy = models.ForeignKey("harness_app.PolicyConfig", on_delete=models.PROTECT)
    adapter_path = models.CharField(max_length=500, blank=True, help_text="empty for the base")
    trained_at_step = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="policy_version_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.job} v{self.number}"


class RLStep(models.Model):
    """One step: the rollout batch sampled from `version`, what training on it measured,
    and the version it produced (none when every group was dropped)."""

    job = models.ForeignKey(RLJob, on_delete=models.CASCADE, related_name="step_rows")
    index = models.PositiveIntegerField()
    status = models.CharField(
        max_length=10, choices=RLStepStatus.choices, default=RLStepStatus.ROLLOUT
    )
    version = models.ForeignKey(PolicyVersion, on_delete=models.PROTECT, related_name="steps")
    batch = models.OneToOneField(
        "trajectories.RolloutBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="rl_step",
    )
    produced = models.ForeignKey(
        PolicyVersion,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="produced_by",
    )
    metrics = models.JSONField(default=dict)
    timings = models.JSONField(default=dict, help_text="seconds per phase")
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "index"], name="rl_step_unique_index")
        ]

    def __str__(self) -> str:
        return f"step {self.index} of {self.job}"


# --- the trainer-facing rollout service (training/services/rollout_service.py) -------------


class RolloutRequestStatus(models.TextChoices):
    OPEN = "open", "Open: groups are being played or delivered"
    SATISFIED = "satisfied", "Satisfied: the groups wanted were acknowledged"
    EXHAUSTED = "exhausted", "Exhausted: every group finished, too few were deliverable"
    CANCELLED = "cancelled", "Cancelled"


class DeliveryState(models.TextChoices):
    PLAYING = "playing", "Playing: episodes still run"
    READY = "ready", "Ready: evaluated, waiting for a consumer"
    LEASED = "leased", "Leased to a consumer until its lease expires"
    ACKED = "acked", "Acknowledged by a consumer"
    ZERO_VARIANCE = "zero_variance", "Dropped: every reward of the group is equal"
    STALE = "stale", "Dropped: its policy version is too far behind the trainer's"
    STRAGGLER = "straggler", "Dropped: enough groups were delivered before it"
    FAILED = "failed", "Dropped: no episode of the group completed with a reward"


class RolloutRequest(models.Model):
    """An outside trainer's batch spec: `groups_wanted` evaluated groups of `group_size`
    episodes sampled from `policy` (the trainer's `policy_version`). The service launches
    `groups_launched` (over-sampled) groups as one rollout batch and delivers them as
    they finish, each under a lease the trainer acknowledges."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    benchmark = models.ForeignKey("harness_app.Benchmark", on_delete=models.PROTECT)
    # The policy sampled: the one asked for, or a copy carrying the sampling overrides.
    policy = models.ForeignKey("harness_app.PolicyConfig", on_delete=models.PROTECT)
    policy_version = models.PositiveIntegerField(default=0)
    batch = models.OneToOneField(
        "trajectories.RolloutBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="rollout_request",
    )
    group_size = models.PositiveIntegerField()
    groups_wanted = models.PositiveIntegerField()
    over_sample = models.FloatField(default=1.0)
    groups_launched = models.PositiveIntegerField()
    staleness_bound = models.PositiveIntegerField(default=0)
    lease_s = models.PositiveIntegerField(default=300)
    sampling = models.JSONField(default=dict, blank=True, help_text="overrides as given")
    normalize_std = models.BooleanField(default=False)
    reconstruction = models.CharField(
        max_length=16, choices=Reconstruction.choices, default=Reconstruction.PREFIX_MERGE
    )
    status = models.CharField(
        max_length=10, choices=RolloutRequestStatus.choices, default=RolloutRequestStatus.OPEN
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"rollout request {self.pk}"


class RolloutDelivery(models.Model):
    """One launched group of a request and where it stands on its way to the trainer."""

    request = models.ForeignKey(RolloutRequest, on_delete=models.CASCADE, related_name="deliveries")
    group = models.OneToOneField(
        "trajectories.RolloutGroup", on_delete=models.CASCADE, related_name="delivery"
    )
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PLAYING
    )
    policy_version = models.PositiveIntegerField(default=0)
    times_delivered = models.PositiveIntegerField(default=0)
    # The current lease's end, copied from it so that the pull's query needs no join.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]
        indexes = [models.Index(fields=["request", "state"], name="delivery_request_state")]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.state})"


class RolloutLease(models.Model):
    """One delivery of a group to a consumer; its token is what the consumer acknowledges.
    A group delivered again gets a new lease, so an old token is known and answered as
    expired rather than unknown."""

    delivery = models.ForeignKey(RolloutDelivery, on_delete=models.CASCADE, related_name="leases")
    token = models.UUIDField(unique=True)
    consumer = models.CharField(max_length=200, blank=True)
    trainer_version = models.PositiveIntegerField(default=0)
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"lease {self.token} of {self.delivery}"
