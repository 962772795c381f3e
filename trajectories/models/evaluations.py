"""Evaluation runs: benchmarks x policy configs x ablation conditions x R runs, as one object.

An evaluation run owns one RolloutBatch per cell and run (`RolloutBatch.evaluation`, with its
condition and run index), so every episode runs on the ordinary rollout workers, baseline
and LLM policies alike (trajectories/services/evaluations.py). Its tables are read from those
batches' episodes (trajectories/selectors/evaluations.py); nothing is stored twice.
"""

from __future__ import annotations

from django.db import models

from harness_app.jobs import Job


class EvaluationStatus(models.TextChoices):
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"


class EvaluationRun(Job):
    """Started running: its batches are what the workers run (no task of its own)."""

    name = models.CharField(max_length=200, blank=True)
    benchmarks = models.ManyToManyField("harness_app.Benchmark", related_name="evaluation_runs")
    policies = models.ManyToManyField("harness_app.PolicyConfig", related_name="evaluation_runs")
    conditions = models.JSONField(default=list, help_text="reference condition names, in order")
    runs = models.PositiveIntegerField(default=3)
    query_limit = models.PositiveIntegerField(null=True, blank=True)
    max_turns = models.PositiveIntegerField(default=40)
    status = models.CharField(
        max_length=10, choices=EvaluationStatus.choices, default=EvaluationStatus.RUNNING
    )

    QUEUED = EvaluationStatus.RUNNING
    FINISHED = (EvaluationStatus.DONE, EvaluationStatus.CANCELLED)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"evaluation run {self.pk} ({self.name or self.status})"
