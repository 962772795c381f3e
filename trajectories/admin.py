"""Rollout records in the admin, view-only: they are evidence (harness_app/admin_base.py).

Every write goes through the modules of trajectories/services/, which keep the denormalised
columns (batch progress, an episode's annotation status) true. The
changelists must stay fast with 100,000 episodes and millions of turns and model calls:
related rows come in the same query (`list_select_related`), filters are on choice columns
(no DISTINCT scan over the table), pages order by primary key, big JSON and token columns
stay unread (`changelist_defer`), and the full-table count is skipped on filtered pages.
"""

from __future__ import annotations

from django.contrib import admin

from harness_app.admin_base import ReadOnlyAdmin
from trajectories.models import (
    AblationMatrix,
    Annotation,
    AnnotationBulkAction,
    AnnotationEvent,
    AnnotationLock,
    CuratedItem,
    Episode,
    EvaluationRun,
    EvidenceEdge,
    EvidenceNode,
    HarnessGroup,
    HarnessRun,
    HarnessTask,
    ModelCall,
    RecordingSession,
    RolloutBatch,
    RolloutGroup,
    SavedFilter,
    Turn,
    Verification,
    VerifierCall,
)


class RecordAdmin(ReadOnlyAdmin):
    """A table that grows with the episodes: newest first by primary key."""

    ordering = ("-pk",)
    show_full_result_count = False


@admin.register(RolloutBatch)
class RolloutBatchAdmin(ReadOnlyAdmin):
    list_display = (
        "pk",
        "benchmark",
        "policy",
        "ablation_label",
        "status",
        "episodes_total",
        "episodes_completed",
        "episodes_failed",
        "created_by",
        "created_at",
    )
    list_filter = ("status", "termination_policy")
    list_select_related = ("benchmark", "policy", "created_by")
    raw_id_fields = ("benchmark", "policy", "evaluation", "created_by")


@admin.register(AblationMatrix)
class AblationMatrixAdmin(ReadOnlyAdmin):
    list_display = (
        "pk",
        "benchmark",
        "policy",
        "runs",
        "status",
        "episodes_total",
        "episodes_done",
        "created_by",
        "created_at",
    )
    list_filter = ("status",)
    list_select_related = ("benchmark", "created_by")
    raw_id_fields = ("benchmark", "created_by")


@admin.register(EvaluationRun)
class EvaluationRunAdmin(ReadOnlyAdmin):
    list_display = ("pk", "name", "runs", "status", "created_by", "created_at")
    list_filter = ("status",)
    list_select_related = ("created_by",)
    raw_id_fields = ("created_by",)


@admin.register(RolloutGroup)
class RolloutGroupAdmin(RecordAdmin):
    list_display = ("pk", "batch", "query")
    list_select_related = ("batch", "query")
    raw_id_fields = ("batch", "query")


@admin.register(Episode)
class EpisodeAdmin(RecordAdmin):
    list_display = (
        "pk",
        "kind",
        "batch",
        "query",
        "sample_index",
        "status",
        "termination_reason",
        "turns",
        "format_errors",
        "reward",
        "final_answer_recall",
        "annotation_status",
        "finished_at",
    )
    list_filter = ("kind", "status", "annotation_status")
    list_select_related = ("batch", "query")
    raw_id_fields = ("group", "batch", "query")
    changelist_defer = ("metrics", "reward_components", "timings", "error")


@admin.register(Turn)
class TurnAdmin(RecordAdmin):
    list_display = (
        "episode",
        "index",
        "format_errors",
        "curated_recall",
        "final_answer_recall",
        "harness_ms",
        "policy_ms",
    )
    list_select_related = ("episode",)
    raw_id_fields = ("episode",)
    changelist_defer = ("tool_calls", "tool_results", "observation", "state")


@admin.register(ModelCall)
class ModelCallAdmin(RecordAdmin):
    list_display = (
        "pk",
        "episode",
        "turn_index",
        "finish_reason",
        "latency_ms",
        "policy_version",
        "agent",
        "aborted",
        "created_at",
    )
    list_filter = ("aborted",)
    list_select_related = ("episode",)
    raw_id_fields = ("episode",)
    # The token blobs are bytes; the detail page shows their lengths instead.
    exclude = ("prompt_token_ids_blob", "completion_token_ids_blob", "completion_logprobs_blob")
    readonly_fields = ("prompt_tokens", "completion_tokens")
    changelist_defer = ("request", "response", "usage", "error", *exclude)

    @admin.display(description="prompt tokens")
    def prompt_tokens(self, call: ModelCall) -> int:
        return len(call.prompt_token_ids)

    @admin.display(description="completion tokens")
    def completion_tokens(self, call: ModelCall) -> int:
        return len(call.completion_token_ids)


@admin.register(VerifierCall)
class VerifierCallAdmin(RecordAdmin):
    list_display = (
        "pk",
        "episode",
        "turn_index",
        "doc_id",
        "verdict",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "latency_ms",
        "created_at",
    )
    list_filter = ("verdict",)
    list_select_related = ("episode",)
    raw_id_fields = ("episode",)
    exclude = ("prompt_token_ids_blob", "completion_token_ids_blob")
    changelist_defer = ("request", "response", "usage", "rationale", "completion", *exclude)


@admin.register(CuratedItem)
class CuratedItemAdmin(RecordAdmin):
    list_display = ("episode", "document", "tag", "added_turn")
    list_select_related = ("episode", "document")
    raw_id_fields = ("episode", "document")


@admin.register(EvidenceNode)
class EvidenceNodeAdmin(RecordAdmin):
    list_display = ("episode", "kind", "key", "label", "is_bridge")
    list_filter = ("kind", "is_bridge")
    list_select_related = ("episode",)
    raw_id_fields = ("episode",)


@admin.register(EvidenceEdge)
class EvidenceEdgeAdmin(RecordAdmin):
    list_display = ("pk", "episode", "source", "target")
    list_select_related = ("episode", "source", "target")
    raw_id_fields = ("episode", "source", "target")


@admin.register(Verification)
class VerificationAdmin(RecordAdmin):
    list_display = ("episode", "document", "verdict", "score", "turn_index")
    list_filter = ("verdict",)
    list_select_related = ("episode", "document")
    raw_id_fields = ("episode", "document")
    changelist_defer = ("evidence",)


@admin.register(Annotation)
class AnnotationAdmin(RecordAdmin):
    list_display = ("episode", "annotator", "label", "reason", "updated_at")
    list_filter = ("label",)
    list_select_related = ("episode", "annotator")
    raw_id_fields = ("episode", "annotator")


@admin.register(AnnotationLock)
class AnnotationLockAdmin(RecordAdmin):
    list_display = ("episode", "annotator", "expires_at")
    list_select_related = ("episode", "annotator")
    raw_id_fields = ("episode", "annotator")


@admin.register(AnnotationBulkAction)
class AnnotationBulkActionAdmin(RecordAdmin):
    list_display = ("pk", "label", "episodes", "actor", "created_at", "undone_at", "undone_by")
    list_filter = ("label",)
    list_select_related = ("actor", "undone_by")
    raw_id_fields = ("actor", "undone_by")


@admin.register(AnnotationEvent)
class AnnotationEventAdmin(RecordAdmin):
    list_display = ("created_at", "kind", "episode", "actor", "bulk_action")
    list_filter = ("kind",)
    list_select_related = ("episode", "actor", "bulk_action")
    raw_id_fields = ("episode", "actor", "bulk_action")


@admin.register(SavedFilter)
class SavedFilterAdmin(ReadOnlyAdmin):
    list_display = ("name", "user", "query_string", "created_at")
    list_select_related = ("user",)
    raw_id_fields = ("user",)


@admin.register(RecordingSession)
class RecordingSessionAdmin(RecordAdmin):
    list_display = (
        "pk",
        "name",
        "task",
        "key_hint",
        "episode",
        "created_by",
        "created_at",
        "expires_at",
        "revoked_at",
        "untrainable_reason",
    )
    list_select_related = ("episode", "created_by")
    raw_id_fields = ("episode", "created_by")
    exclude = ("key_hash",)  # the key's hash is how the proxy finds a session; keep it out


@admin.register(HarnessTask)
class HarnessTaskAdmin(ReadOnlyAdmin):
    list_display = ("pk", "name", "eval_command", "timeout_s", "eval_timeout_s", "created_at")
    list_select_related = ("created_by",)
    raw_id_fields = ("created_by",)
    ordering = ("-pk",)


@admin.register(HarnessGroup)
class HarnessGroupAdmin(ReadOnlyAdmin):
    list_display = ("pk", "task", "kind", "model", "size", "status", "created_at")
    list_filter = ("status", "kind")
    list_select_related = ("task", "created_by")
    raw_id_fields = ("task", "created_by")
    ordering = ("-pk",)


@admin.register(HarnessRun)
class HarnessRunAdmin(RecordAdmin):
    list_display = ("pk", "group", "index", "status", "exit_code", "reward", "finished_at")
    list_filter = ("status",)
    list_select_related = ("group",)
    raw_id_fields = ("group", "session")
