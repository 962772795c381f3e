"""Rollout batches, groups, episodes, turns and the model calls behind them; ablation
matrices (`ablations.py`), evaluation runs (`evaluations.py`), harness tasks
(`harness_tasks.py`) and the LLM verifier's calls (`verifier_calls.py`) live beside this
module.

An episode's turns and model calls are written as they happen, so a crashed worker leaves a
partial episode that `episode_run` deletes and re-runs from the start (see services.py).
Final-state rows (curated items, evidence graph, verifications) are written once, with the
episode's completion, for querying across episodes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models

from harness_app.harness.llm.reconstruct import CallTokens
from trajectories.models.ablations import AblationMatrix as AblationMatrix
from trajectories.models.ablations import MatrixStatus as MatrixStatus
from trajectories.models.annotations import Annotation as Annotation
from trajectories.models.annotations import AnnotationBulkAction as AnnotationBulkAction
from trajectories.models.annotations import AnnotationEvent as AnnotationEvent
from trajectories.models.annotations import AnnotationEventKind as AnnotationEventKind
from trajectories.models.annotations import AnnotationLabel as AnnotationLabel
from trajectories.models.annotations import AnnotationLock as AnnotationLock
from trajectories.models.annotations import AnnotationReason as AnnotationReason
from trajectories.models.evaluations import EvaluationRun as EvaluationRun
from trajectories.models.evaluations import EvaluationStatus as EvaluationStatus
from trajectories.models.harness_tasks import HarnessGroup as HarnessGroup
from trajectories.models.harness_tasks import HarnessGroupStatus as HarnessGroupStatus
from trajectories.models.harness_tasks import HarnessRun as HarnessRun
from trajectories.models.harness_tasks import HarnessRunStatus as HarnessRunStatus
from trajectories.models.harness_tasks import HarnessTask as HarnessTask
from trajectories.models.verifier_calls import VerifierCall as VerifierCall

if TYPE_CHECKING:
    from harness_app.models import Query


class TerminationPolicy(models.TextChoices):
    LAST_TOOL = "last_tool", "last_tool: a reply without a tool call ends the episode"
    MAX_TURNS = "max_turns", "max_turns: run until end_search, budget or max turns"


class BatchStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Completed with failures"
    CANCELLED = "cancelled", "Cancelled"


class EpisodeStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINISHED_EPISODE = (EpisodeStatus.COMPLETED, EpisodeStatus.FAILED, EpisodeStatus.CANCELLED)
# Finished without metrics: a failed or cancelled episode was never scored, so its recalls,
# tool diversity and reward are null (services/rollouts.py), never a misleading 0.
UNSCORED_EPISODE = (EpisodeStatus.FAILED, EpisodeStatus.CANCELLED)

# Why an episode ended (docs/rollouts.md). Normal ends first, then the reasons that mean the
# infrastructure failed (the episode is marked failed), then cancellation.
ENDED_REASONS = (
    "end_search",
    "max_turns",
    "context_budget",
    "format_errors",
    "no_tool_call",
    "context_overflow",
)
FAILED_REASONS = (
    "model_unreachable",
    "model_timeout",
    "model_server_error",
    "model_bad_request",
    "model_bad_response",
    "token_capture_missing",
    "token_count_mismatch",
    "verifier_unreachable",
    "verifier_error",
    "reranker_unreachable",
    "reranker_error",
    "time_limit",
    "error",
)
TERMINATION_REASONS = (*ENDED_REASONS, *FAILED_REASONS, "cancelled")


class EpisodeKind(models.TextChoices):
    """A rollout runs our harness from a batch; a recorded episode is an outside agent's
    session captured by the recording proxy (trajectories/proxy/). Recorded episodes
    have no batch, group or query: the agent, not the workbench, chose the task."""

    ROLLOUT = "rollout", "Rollout"
    RECORDED = "recorded", "Recorded"


class AnnotationStatus(models.TextChoices):
    """An episode's verdict over all its annotations (kept by services/annotations.py)."""

    NONE = "none", "Not annotated"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    FLAGGED = "flagged", "Flagged"
    DISPUTED = "disputed", "Disputed (approved and rejected)"


class RolloutBatch(models.Model):
    benchmark = models.ForeignKey("harness_app.Benchmark", on_delete=models.PROTECT)
    policy = models.ForeignKey("harness_app.PolicyConfig", on_delete=models.PROTECT)
    ablation = models.JSONField(default=dict, help_text="harness Ablation.to_json()")
    ablation_label = models.CharField(max_length=200, default="full")
    samples_per_query = models.PositiveIntegerField(default=1)
    max_turns = models.PositiveIntegerField(default=40)
    termination_policy = models.CharField(
        max_length=20, choices=TerminationPolicy.choices, default=TerminationPolicy.MAX_TURNS
    )
    query_limit = models.PositiveIntegerField(null=True, blank=True)
    reward_weights = models.JSONField(default=dict)
    # A teacher batch's filter rule (trajectories/teacher_rule.py), fixed at creation: its
    # completed episodes that pass enter the annotation queue. None: not a teacher batch.
    teacher_rule = models.JSONField(null=True, blank=True)
    # False for a server that returns no token ids (a hosted API): plain chat completions,
    # calls recorded without tokens, exports rebuilt with the student's chat template.
    capture_tokens = models.BooleanField(default=True)
    # One cell-run of an evaluation run: its condition (a reference name) and run index.
    evaluation = models.ForeignKey(
        EvaluationRun, null=True, blank=True, on_delete=models.CASCADE, related_name="batches"
    )
    evaluation_condition = models.CharField(max_length=60, blank=True)
    evaluation_run_index = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=20, choices=BatchStatus.choices, default=BatchStatus.QUEUED
    )
    episodes_total = models.PositiveIntegerField(default=0)
    episodes_completed = models.PositiveIntegerField(default=0)
    episodes_failed = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"batch {self.pk} ({self.benchmark_id}, {self.ablation_label})"

    @property
    def episodes_finished(self) -> int:
        return self.episodes_completed + self.episodes_failed

    @property
    def progress(self) -> float:
        return self.episodes_finished / self.episodes_total if self.episodes_total else 0.0


class RolloutGroup(models.Model):
    """The samples of one query within a batch: the unit of group-relative advantages."""

    batch = models.ForeignKey(RolloutBatch, on_delete=models.CASCADE, related_name="groups")
    query = models.ForeignKey("harness_app.Query", on_delete=models.PROTECT)
    # Chat messages the episodes start from (one line of a train.jsonl); empty = fresh start.
    prefix_messages = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["batch", "query"], name="group_unique_query")
        ]

    def __str__(self) -> str:
        return f"group {self.pk} (batch {self.batch_id}, query {self.query_id})"


class Episode(models.Model):
    kind = models.CharField(max_length=10, choices=EpisodeKind.choices, default=EpisodeKind.ROLLOUT)
    # Null only for recorded episodes (a check constraint holds rollouts to all three).
    group = models.ForeignKey(
        RolloutGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="episodes"
    )
    # Denormalised from the group so list filters need no joins on the hot path.
    batch = models.ForeignKey(
        RolloutBatch, null=True, blank=True, on_delete=models.CASCADE, related_name="episodes"
    )
    query = models.ForeignKey("harness_app.Query", null=True, blank=True, on_delete=models.PROTECT)
    sample_index = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=20, choices=EpisodeStatus.choices, default=EpisodeStatus.PENDING
    )
    termination_reason = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    policy_version = models.CharField(max_length=100, blank=True)
    metrics = models.JSONField(default=dict)
    reward = models.FloatField(null=True, blank=True)
    reward_components = models.JSONField(default=dict)
    timings = models.JSONField(default=dict, help_text="seconds per stage")
    # Metric columns copied out of `metrics` so filters and sorts can use indexes.
    curated_recall = models.FloatField(null=True, blank=True)
    trajectory_recall = models.FloatField(null=True, blank=True)
    final_answer_recall = models.FloatField(null=True, blank=True)
    tool_diversity = models.PositiveSmallIntegerField(null=True, blank=True)
    turns = models.PositiveIntegerField(default=0)
    format_errors = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Denormalised from the annotations by trajectories.services.annotations, so list filters, the
    # annotation queue and SFT exports read one indexed column.
    annotation_status = models.CharField(
        max_length=16, choices=AnnotationStatus.choices, default=AnnotationStatus.NONE
    )
    annotation_count = models.PositiveSmallIntegerField(default=0)
    # A teacher batch's verdict on the completed episode: True enters the annotation queue,
    # False stays out of it with the failed clauses listed; None outside teacher batches.
    teacher_passed = models.BooleanField(null=True, blank=True)
    teacher_failures = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "sample_index"], name="episode_unique_sample"),
            models.CheckConstraint(
                condition=models.Q(kind=EpisodeKind.RECORDED)
                | models.Q(group__isnull=False, batch__isnull=False, query__isnull=False),
                name="episode_rollout_has_batch",
            ),
        ]
        indexes = [
            models.Index(fields=["kind", "-id"]),
            models.Index(fields=["batch", "status"]),
            models.Index(fields=["status", "heartbeat_at"]),
            models.Index(fields=["final_answer_recall"]),
            models.Index(fields=["curated_recall"]),
            models.Index(fields=["reward"]),
            models.Index(fields=["annotation_status", "annotation_count"]),
        ]

    def __str__(self) -> str:
        if self.kind == EpisodeKind.RECORDED:
            return f"episode {self.pk} (recorded)"
        return f"episode {self.pk} (batch {self.batch_id}, sample {self.sample_index})"

    @property
    def is_recorded(self) -> bool:
        return self.kind == EpisodeKind.RECORDED

    def rollout_parts(self) -> tuple[RolloutBatch, RolloutGroup, Query]:
        """The batch, group and query of a rollout; code that runs the harness needs all
        three, and a recorded episode has none."""
        if self.batch is None or self.group is None or self.query is None:
            raise ValueError(f"episode {self.pk} is {self.kind}: it has no batch, group or query")
        return self.batch, self.group, self.query


class Turn(models.Model):
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="turn_rows")
    index = models.PositiveIntegerField()
    tool_calls = models.JSONField(default=list)
    # One {"call_id", "name", "content", "ok", "error"} per call: each result as sent back.
    tool_results = models.JSONField(default=list)
    observation = models.TextField(help_text="exactly as the model saw it")
    # Every SNAPSHOT_EVERY turns a full state snapshot; in between, the delta from the
    # previous turn (harness/jsondelta.py), so storage grows linearly with turns.
    state = models.JSONField(help_text="harness state after this turn, full or as a delta")
    state_is_delta = models.BooleanField(default=False)
    curated_recall = models.FloatField(default=0.0)
    trajectory_recall = models.FloatField(default=0.0)
    final_answer_recall = models.FloatField(default=0.0)
    format_errors = models.PositiveIntegerField(default=0)
    harness_ms = models.FloatField(default=0.0)
    policy_ms = models.FloatField(default=0.0)

    class Meta:
        ordering = ["index"]
        constraints = [
            models.UniqueConstraint(fields=["episode", "index"], name="turn_unique_index")
        ]

    def __str__(self) -> str:
        return f"turn {self.index} of episode {self.episode_id}"


def pack_ints(values: Iterable[int]) -> bytes:
    return array("i", values).tobytes()


def unpack_ints(blob: bytes | memoryview | None) -> list[int]:
    out = array("i")
    if blob:
        out.frombytes(bytes(blob))
    return out.tolist()


def pack_floats(values: Iterable[float]) -> bytes:
    return array("f", values).tobytes()


def unpack_floats(blob: bytes | memoryview | None) -> list[float]:
    out = array("f")
    if blob:
        out.frombytes(bytes(blob))
    return out.tolist()


class ModelCall(models.Model):
    """One chat completion, token-faithful: ids as int32 and logprobs as float32 blobs."""

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="model_calls")
    turn_index = models.PositiveIntegerField()
    request = models.JSONField()
    response = models.JSONField(default=dict)
    prompt_token_ids_blob = models.BinaryField(default=bytes)
    completion_token_ids_blob = models.BinaryField(default=bytes)
    completion_logprobs_blob = models.BinaryField(default=bytes)
    finish_reason = models.CharField(max_length=40, blank=True)
    usage = models.JSONField(default=dict)
    latency_ms = models.FloatField(default=0.0)
    policy_version = models.CharField(max_length=100, blank=True)
    error = models.TextField(blank=True)
    # Recorded calls only: a fingerprint of the system prompt, which tells the main agent
    # from its subagents (trajectories/services/recording.py), and whether the call never completed
    # (upstream unreachable, a broken stream, missing token ids), which makes the session
    # non-trainable.
    agent = models.CharField(max_length=16, blank=True)
    aborted = models.BooleanField(default=False)
    # Recorded calls only: the API the agent spoke ("chat", "messages" or "responses"); the
    # stored request and response are the chat completion it was translated to.
    api = models.CharField(max_length=12, blank=True)
    # What a token-in prompt was rendered from: all of it when `rerendered` (the prompt was
    # rebuilt, so the call is a training sequence of its own), else the messages new since
    # the previous call (selectors.calls.turn_prompts joins them). Empty for chat requests.
    prompt_messages = models.JSONField(default=list, blank=True)
    rerendered = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn_index", "pk"]

    def __str__(self) -> str:
        return f"model call {self.pk} (episode {self.episode_id}, turn {self.turn_index})"

    @property
    def prompt_token_ids(self) -> list[int]:
        return unpack_ints(self.prompt_token_ids_blob)

    @property
    def completion_token_ids(self) -> list[int]:
        return unpack_ints(self.completion_token_ids_blob)

    @property
    def completion_logprobs(self) -> list[float]:
        return unpack_floats(self.completion_logprobs_blob)

    def call_tokens(self) -> CallTokens:
        """The call as trajectory reconstruction reads it."""
        return CallTokens(
            self.pk,
            self.prompt_token_ids,
            self.completion_token_ids,
            self.completion_logprobs,
            self.policy_version,
            self.agent,
            self.rerendered,
        )

    @property
    def own_prompt_messages(self) -> list[dict[str, Any]] | None:
        """The whole prompt when this call alone holds it (chat or rerendered), else None."""
        messages = self.request.get("messages") if isinstance(self.request, dict) else None
        if messages is not None:
            return list(messages)
        return list(self.prompt_messages) if self.rerendered else None

    def token_fields(self) -> dict[str, Any]:
        return {
            "prompt_token_ids": self.prompt_token_ids,
            "completion_token_ids": self.completion_token_ids,
            "completion_logprobs": self.completion_logprobs,
        }


class CuratedItem(models.Model):
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="curated_items")
    document = models.ForeignKey("harness_app.Document", on_delete=models.PROTECT)
    tag = models.CharField(max_length=20)
    added_turn = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["episode", "document"], name="curated_unique_doc")
        ]

    def __str__(self) -> str:
        return f"{self.document_id} [{self.tag}] in episode {self.episode_id}"


class EvidenceNode(models.Model):
    class Kind(models.TextChoices):
        DOCUMENT = "document", "Document"
        ENTITY = "entity", "Entity"

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="evidence_nodes")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    key = models.CharField(max_length=300)
    label = models.CharField(max_length=300)
    is_bridge = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["episode", "kind", "key"], name="node_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class EvidenceEdge(models.Model):
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="evidence_edges")
    source = models.ForeignKey(EvidenceNode, on_delete=models.CASCADE, related_name="+")
    target = models.ForeignKey(EvidenceNode, on_delete=models.CASCADE, related_name="+")

    def __str__(self) -> str:
        return f"{self.source_id} -> {self.target_id}"


class Verification(models.Model):
    class Verdict(models.TextChoices):
        SUPPORTED = "supported", "Supported"
        UNSUPPORTED = "unsupported", "Unsupported"
        UNCLEAR = "unclear", "Unclear"

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="verifications")
    document = models.ForeignKey("harness_app.Document", on_delete=models.PROTECT)
    claim = models.TextField()
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    score = models.FloatField(default=0.0)
    evidence = models.JSONField(default=list)
    turn_index = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.verdict}: {self.claim[:60]}"


# --- annotations (written by trajectories/services/annotations.py only) ------------------


class SavedFilter(models.Model):
    """A named episode-list filter of one user. The URL is the permalink; this only names it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_filters"
    )
    name = models.CharField(max_length=100)
    query_string = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="saved_filter_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.name}: ?{self.query_string}"


# --- recording sessions (written by trajectories/services/recording.py only) -----------------


class RecordingSession(models.Model):
    """An outside agent's session behind the recording proxy; it owns one recorded Episode.

    The proxy key is shown once, at creation; only its SHA-256 is stored. A key is a random
    256-bit secret, so a fast hash is enough: there is nothing to brute-force.
    """

    episode = models.OneToOneField(Episode, on_delete=models.CASCADE, related_name="recording")
    name = models.CharField(max_length=200, blank=True)
    # Sessions with the same task key are samples of one task: an RL group.
    task = models.CharField(max_length=200, blank=True)
    key_hash = models.CharField(max_length=64, unique=True)
    key_hint = models.CharField(max_length=16, help_text="the key's first characters")
    metadata = models.JSONField(default=dict, blank=True)
    # The trainer's sampling, applied to every call whatever the agent asks: model name
    # mapping, temperature, top_p and the max_tokens clamp (harness_app/wire/sampling.py).
    sampling = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Why the session cannot be trained on ("" when it can); kept current by each record.
    untrainable_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["task"])]

    def __str__(self) -> str:
        return f"recording session {self.pk} ({self.name or self.key_hint})"

    @property
    def trainable(self) -> bool:
        return not self.untrainable_reason
