"""What every training job's row shares (SFT jobs and RL jobs): the job kernel's row
(harness_app/jobs.py: status, owner, times, error, attempt) with the training statuses, the
base weights and the LoRA shape; and how model calls become training data
(`Reconstruction`, which exports and the rollout service use too)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from harness_app.jobs import Job


class Reconstruction(models.TextChoices):
    """harness.llm.reconstruct.STRATEGIES, as a field's choices."""

    PREFIX_MERGE = "prefix_merge", "Prefix merging: one sequence per chain of calls"
    PER_REQUEST = "per_request", "Per request: one sequence per call"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


JOB_FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


class TrainingJob(Job):
    """A LoRA adapter trained on `base_model_dir`, the weights the vLLM server behind the
    job's base policy serves, and published to that server. Each kind adds its base
    policy (its own reverse name), its settings and its progress."""

    kind_label: ClassVar[str] = "training job"  # "SFT job", "RL job": pages and messages

    name = models.CharField(max_length=200, blank=True)
    base_model_dir = models.CharField(max_length=500, help_text="local folder of the base model")
    lora_targets = models.JSONField(default=list, help_text="module names LoRA adapts")
    gradient_checkpointing = models.BooleanField(
        null=True, blank=True, help_text="blank: on for CUDA, off on the CPU"
    )
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)

    DONE = JobStatus.COMPLETED
    FINISHED = JOB_FINISHED

    class Meta:
        abstract = True
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name or f"{self.kind_label} {self.pk}"
