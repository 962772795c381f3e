"""RL jobs: steps of rollouts → advantages → a trainer step → a new policy version served
by vLLM, each step's row and each version's."""

from __future__ import annotations

from django.db import models

from training.models.jobs import Reconstruction, TrainingJob
from training.models.sft import SFTJob
from trajectories.models import TerminationPolicy


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


class RLJob(TrainingJob):
    """A run of on-policy RL: each step samples groups from the newest policy version,
    trains one optimiser step on them and serves the result as the next version.

    The trainer loads `base_model_dir`, the same weights the vLLM server behind
    `base_policy` serves, so the sampler's and the trainer's logprobs agree."""

    kind_label = "RL job"
    # No TASK: between two steps a running job has no task in hand (its next piece is
    # scheduled, acked late), so the kernel's recovery leaves RL jobs alone.

    benchmark = models.ForeignKey("harness_app.Benchmark", on_delete=models.PROTECT)
    base_policy = models.ForeignKey(
        "harness_app.PolicyConfig", on_delete=models.PROTECT, related_name="rl_jobs"
    )
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
    tokens_per_turn = models.PositiveIntegerField(
        null=True, blank=True, help_text="max_tokens per model call; blank: the policy's own"
    )
    temperature = models.FloatField(
        null=True, blank=True, help_text="sampling temperature; blank: the policy's own"
    )
    max_sequence_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="longer trajectories are dropped from training"
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
    steps_done = models.PositiveIntegerField(default=0)

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
