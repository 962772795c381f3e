"""Evaluation runs: benchmarks x policy configs x ablation conditions x R runs, as one object.

An evaluation run owns one RolloutBatch per cell and run (`RolloutBatch.evaluation`, with its
condition and run index), so every episode runs on the ordinary rollout workers, baseline
and LLM policies alike (trajectories/services/evaluations.py). Its tables are read from those
batches' episodes (trajectories/selectors/evaluations.py); nothing is stored twice.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class EvaluationStatus(models.TextChoices):
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"


class EvaluationRun(models.Model):
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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"evaluation run {self.pk} ({self.name or self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status != EvaluationStatus.RUNNING
