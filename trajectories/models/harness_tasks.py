"""Harness tasks: a small repository, an instruction and an evaluation command, run N times
by one agent harness (a coding-agent CLI, or any command) as one GRPO group.

Each run owns a RecordingSession: the harness talks to the model through the recording
proxy with the session's key, so its calls become the session's recorded episode. All the
runs of a group share the session `task` key `HarnessGroup.task_key`, which is what
`training.rl.samples.rl_samples_for_recordings` groups by. Written by
trajectories/services/harness_runs.py only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from harness_app import queues
from harness_app.jobs import Job


class HarnessTask(models.Model):
    name = models.CharField(max_length=200)
    instruction = models.TextField()
    # The repository: {relative path: text}, written to a fresh folder and committed once
    # before each run.
    files = models.JSONField(default=dict)
    # Run in the repository after the agent; exit 0 scores 1.0, anything else 0.0, unless
    # its last stdout line is `reward: <float>`.
    eval_command = models.TextField()
    timeout_s = models.PositiveIntegerField(default=600)
    eval_timeout_s = models.PositiveIntegerField(default=120)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"harness task {self.pk} ({self.name})"


class HarnessGroupStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"


class HarnessRunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"  # the harness exited 0 (the reward is the eval's)
    FAILED = "failed", "Failed"  # the harness exited non-zero
    TIMED_OUT = "timed_out", "Timed out"
    ERROR = "error", "Error"  # the run could not be carried out (see `error`)


FINISHED_RUN = (
    HarnessRunStatus.SUCCEEDED,
    HarnessRunStatus.FAILED,
    HarnessRunStatus.TIMED_OUT,
    HarnessRunStatus.ERROR,
)


class HarnessGroup(models.Model):
    """N runs of one task by one harness: the unit of group-relative advantages."""

    task = models.ForeignKey(HarnessTask, on_delete=models.PROTECT, related_name="groups")
    kind = models.CharField(max_length=20, help_text="one of trajectories.agent_clis.CLI_KINDS")
    command = models.JSONField(default=list, blank=True, help_text="argv, for kind 'command'")
    model = models.CharField(max_length=200, help_text="the model name the harness is told")
    # Stored on each run's RecordingSession.sampling; the proxy applies them to every call.
    sampling = models.JSONField(default=dict, blank=True)
    size = models.PositiveIntegerField()
    status = models.CharField(
        max_length=20, choices=HarnessGroupStatus.choices, default=HarnessGroupStatus.QUEUED
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"harness group {self.pk} (task {self.task_id}, {self.kind} x{self.size})"

    @property
    def task_key(self) -> str:
        """The RecordingSession.task its runs share: one RL group."""
        return f"harness-group-{self.pk}"


class HarnessRun(Job):
    group = models.ForeignKey(HarnessGroup, on_delete=models.CASCADE, related_name="runs")
    index = models.PositiveIntegerField()
    session = models.OneToOneField(
        "trajectories.RecordingSession", on_delete=models.PROTECT, related_name="harness_run"
    )
    status = models.CharField(
        max_length=20, choices=HarnessRunStatus.choices, default=HarnessRunStatus.QUEUED
    )
    exit_code = models.IntegerField(null=True, blank=True)
    reward = models.FloatField(null=True, blank=True)
    eval_exit_code = models.IntegerField(null=True, blank=True)
    eval_output = models.TextField(blank=True, help_text="the evaluation's stdout+stderr tail")
    stdout = models.TextField(blank=True, help_text="the harness's stdout tail")
    stderr = models.TextField(blank=True, help_text="the harness's stderr tail")
    seconds = models.FloatField(null=True, blank=True, help_text="the harness's wall time")

    # An infrastructure failure is an error; `failed` is the harness's own non-zero exit.
    DONE = HarnessRunStatus.SUCCEEDED
    FAILED = HarnessRunStatus.ERROR
    FINISHED = FINISHED_RUN
    TASK = queues.HARNESS_RUN

    class Meta:
        ordering = ["group", "index"]
        constraints = [
            models.UniqueConstraint(fields=["group", "index"], name="harness_run_unique_index")
        ]

    def __str__(self) -> str:
        return f"harness run {self.pk} (group {self.group_id}, #{self.index})"
