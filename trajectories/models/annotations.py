"""Annotation: labels and reasons, the per-episode annotation, locks, bulk actions and the
audit log of every change (trajectories/services/annotations.py writes them)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AnnotationLabel(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    FLAG = "flag", "Flag for review"


class AnnotationReason(models.TextChoices):
    """Suggested reasons; `Annotation.reason` also takes free text."""

    GOOD_TRAJECTORY = "good_trajectory", "Good trajectory"
    REWARD_HACKING = "reward_hacking", "Reward hacking"
    WRONG_EVIDENCE = "wrong_evidence", "Curated the wrong evidence"
    INCOMPLETE = "incomplete", "Stopped too early"
    WASTEFUL = "wasteful", "Wasteful or repetitive tool use"
    FORMAT = "format", "Format errors"
    OTHER = "other", "Other"


class Annotation(models.Model):
    """One annotator's label on one episode; relabelling updates the row."""

    episode = models.ForeignKey(
        "trajectories.Episode", on_delete=models.CASCADE, related_name="annotations"
    )
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotations"
    )
    label = models.CharField(max_length=10, choices=AnnotationLabel.choices)
    reason = models.CharField(max_length=200, blank=True)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["episode", "annotator"], name="annotation_unique_annotator"
            )
        ]
        indexes = [models.Index(fields=["annotator", "-updated_at"])]

    def __str__(self) -> str:
        return f"{self.label} on episode {self.episode_id} by {self.annotator_id}"


class AnnotationLock(models.Model):
    """An episode held by one annotator until `expires_at`; at most one per episode.

    The unique episode column is what keeps two annotators off the same item at once: a
    second taker's insert fails and it moves on to the next candidate.
    """

    episode = models.OneToOneField(
        "trajectories.Episode", on_delete=models.CASCADE, related_name="annotation_lock"
    )
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotation_locks"
    )
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["annotator", "expires_at"])]

    def __str__(self) -> str:
        return f"episode {self.episode_id} held by {self.annotator_id} until {self.expires_at}"


class AnnotationBulkAction(models.Model):
    """One label applied to every episode a filter matched, undoable as a whole."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    filters = models.JSONField(default=dict)
    label = models.CharField(max_length=10, choices=AnnotationLabel.choices)
    reason = models.CharField(max_length=200, blank=True)
    episodes = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"bulk {self.label} of {self.episodes} episodes"


class AnnotationEventKind(models.TextChoices):
    LABEL = "label", "Labelled"
    LOCK = "lock", "Took the episode"
    RELEASE = "release", "Released the episode"
    BULK_LABEL = "bulk_label", "Labelled by a bulk action"
    BULK_UNDO = "bulk_undo", "Bulk action undone"
    SKIP = "skip", "Skipped the episode"
    UNDO = "undo", "Label undone"


class AnnotationEvent(models.Model):
    """The audit trail: who did what to which episode, when, with the label before/after.

    A bulk action writes one event per episode; its undo reads them back to restore what
    each annotator had before.
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=12, choices=AnnotationEventKind.choices)
    episode = models.ForeignKey(
        "trajectories.Episode",
        null=True,
        on_delete=models.CASCADE,
        related_name="annotation_events",
    )
    bulk_action = models.ForeignKey(
        AnnotationBulkAction, null=True, on_delete=models.CASCADE, related_name="events"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["episode", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.kind} on episode {self.episode_id} by {self.actor_id}"


# --- saved episode-list filters (written by trajectories/services/saved_filters.py only) --------
