"""SFT exports (immutable JSONL snapshots of annotated episodes, with their provenance) and
SFT jobs (a LoRA adapter trained on an export, served by vLLM as a policy)."""

from __future__ import annotations

from django.db import models

from harness_app import queues
from harness_app.jobs import Job
from training.models.jobs import JobStatus, Reconstruction, TrainingJob


class ExportStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ExportFormat(models.TextChoices):
    CHAT = "chat", "Chat messages with tools (OpenAI format)"
    TOKENS = "tokens", "Token ids with loss labels"


class SFTExport(Job):
    """One export. Once done, its file and rows are never rewritten: a new export is a
    new row and a new file (training/services/exports.py refuses to run a finished one
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


class SFTJob(TrainingJob):
    """LoRA supervised fine-tuning on one export's approved trajectories.

    The trainer (training/sft/train.py) loads `base_model_dir`, the weights the vLLM server
    behind `base_policy` serves; the finished adapter is loaded into that server and
    becomes `policy`, which rollouts and RL jobs (`warm_start`) can use."""

    kind_label = "SFT job"
    # One task trains the whole job; a running job whose task no live worker holds lost
    # its worker (training/services/sft_jobs.py says what recovery does with it).
    TASK = queues.SFT_JOB_RUN

    export = models.ForeignKey(SFTExport, on_delete=models.PROTECT, related_name="sft_jobs")
    base_policy = models.ForeignKey(
        "harness_app.PolicyConfig", on_delete=models.PROTECT, related_name="sft_jobs"
    )
    # The trainer's settings (training.sft.train.SFTSettings), defaults from Harness-1.
    lora_rank = models.PositiveSmallIntegerField(default=32)
    lora_alpha = models.PositiveSmallIntegerField(default=64)
    lora_dropout = models.FloatField(default=0.0)
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
    save_steps = models.PositiveIntegerField(default=50, help_text="a checkpoint every N steps")
    eval_steps = models.PositiveIntegerField(default=10, help_text="the eval loss every N steps")
    cancel_requested = models.BooleanField(default=False)
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

    @property
    def progress(self) -> float:
        if self.status == JobStatus.COMPLETED:
            return 1.0
        return min(self.step / self.total_steps, 1.0) if self.total_steps else 0.0

    @property
    def can_resume(self) -> bool:
        """Stopped with a checkpoint, and not after training finished (a job whose trained
        adapter its server refused is published again, not trained again)."""
        stopped = self.status in (JobStatus.CANCELLED, JobStatus.FAILED)
        return stopped and bool(self.checkpoint_path) and not self.adapter_path
