"""SFT exports: immutable JSONL snapshots of annotated episodes, with their provenance.

RL batches, RL jobs and policy versions will live here too (see docs/architecture.md).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ExportStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ExportFormat(models.TextChoices):
    CHAT = "chat", "Chat messages with tools (OpenAI format)"
    TOKENS = "tokens", "Token ids with loss labels"


class SFTExport(models.Model):
    """One export. Once done, its file and rows are never rewritten: a new export is a
    new row and a new file (training/services.py refuses to run a finished one again)."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    filters = models.JSONField(default=dict, help_text="episode filters, as checked")
    fmt = models.CharField(max_length=10, choices=ExportFormat.choices, default=ExportFormat.CHAT)
    status = models.CharField(
        max_length=10, choices=ExportStatus.choices, default=ExportStatus.QUEUED
    )
    episodes = models.PositiveIntegerField(default=0)
    records = models.PositiveIntegerField(default=0, help_text="JSONL lines written")
    skipped = models.PositiveIntegerField(default=0, help_text="matched but not exportable")
    manifest = models.JSONField(default=dict)
    file_path = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"SFT export {self.pk} ({self.fmt}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (ExportStatus.DONE, ExportStatus.FAILED)


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
