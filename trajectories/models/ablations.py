"""Ablation matrices: Harness-1's named conditions x N runs of an in-process policy over a
benchmark, run by one task in one process (trajectories/services/ablations.py).

The result is the harness's own `ablation_matrix.matrix_report()` document, the same JSON that
`python -m harness_app.harness ablate --json` prints; it is written once, with the status
`done`, so a matrix never shows a half-written result.
"""

from __future__ import annotations

from django.db import models

from harness_app import queues
from harness_app.jobs import Job
from harness_app.models import RetrieverKind


class MatrixStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class AblationMatrix(Job):
    benchmark = models.ForeignKey(
        "harness_app.Benchmark", on_delete=models.PROTECT, related_name="ablation_matrices"
    )
    policy = models.CharField(
        max_length=50, default="baseline", help_text="an in-process harness policy by name"
    )
    retriever = models.CharField(
        max_length=10,
        choices=RetrieverKind.choices,
        default=RetrieverKind.BM25,
        help_text="what every condition's search tool ranks with",
    )
    conditions = models.JSONField(default=list, help_text="reference condition names, in order")
    runs = models.PositiveIntegerField(default=1)
    query_limit = models.PositiveIntegerField(null=True, blank=True)
    max_turns = models.PositiveIntegerField(default=40)
    status = models.CharField(
        max_length=10, choices=MatrixStatus.choices, default=MatrixStatus.QUEUED
    )
    episodes_total = models.PositiveIntegerField(default=0)
    episodes_done = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict, help_text="harness ablate.matrix_report(), once done")

    TASK = queues.ABLATION_MATRIX_RUN

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "ablation matrices"

    def __str__(self) -> str:
        return f"ablation matrix {self.pk} ({self.policy}, {self.status})"

    @property
    def progress(self) -> float:
        """Finished episodes / total, 0 to 1."""
        return self.episodes_done / self.episodes_total if self.episodes_total else 0.0
