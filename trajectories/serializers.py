"""API input and output shapes for batches, ablation matrices, evaluation runs, episodes and
annotations."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from harness_app.harness.ablation import MECHANISMS, REFERENCE_CONDITIONS, condition_name
from harness_app.ids import MAX_ID
from harness_app.models import Benchmark, PolicyConfig, RetrieverKind
from harness_app.serializers import BoundedIntegerField, RowIdField
from trajectories.models import (
    AblationMatrix,
    Annotation,
    AnnotationBulkAction,
    AnnotationLabel,
    Episode,
    EvaluationRun,
    ModelCall,
    RolloutBatch,
    TerminationPolicy,
    Turn,
)
from trajectories.selectors.evaluations import METRICS as EVALUATION_METRICS
from trajectories.selectors.turns import turn_states
from trajectories.services.annotations import MAX_OVERLAP
from trajectories.services.rollouts import MAX_QUERY_LIMIT, MAX_TURNS_LIMIT

# --- batches --------------------------------------------------------------------------------


class ConditionField(serializers.ChoiceField):
    """An ablation condition by its one name; the reference's older names (`minus_verify`,
    ...) are accepted and read as it. The schema lists the one names only."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=list(REFERENCE_CONDITIONS), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        return super().to_internal_value(condition_name(data) if isinstance(data, str) else data)


class BatchCreateSerializer(serializers.Serializer[Any]):
    """Types only: the ranges and the rest are checked by services.batch_create."""

    benchmark = RowIdField(queryset=Benchmark.objects.all())
    policy = RowIdField(queryset=PolicyConfig.objects.all())
    samples_per_query = serializers.IntegerField(default=1, help_text="1 to 64")
    max_turns = serializers.IntegerField(default=40, help_text="1 to 200")
    termination_policy = serializers.ChoiceField(
        choices=TerminationPolicy.choices, default=TerminationPolicy.MAX_TURNS
    )
    ablate = serializers.ListField(
        child=serializers.ChoiceField(choices=MECHANISMS),
        default=list,
        help_text="mechanisms to switch off; the batch is labelled -<mechanism> for each",
    )
    query_limit = serializers.IntegerField(required=False, allow_null=True, default=None)
    reward_weights = serializers.DictField(
        default=dict,
        help_text='weight overrides; {"preset": "harness1"} starts from a named preset',
    )
    teacher_rule = serializers.DictField(
        required=False,
        allow_null=True,
        default=None,
        help_text="a teacher batch's filter rule, fixed once saved: curated_recall_min, "
        "final_answer_recall_min, trajectory_recall_min (0 to 1), format_errors_max, "
        "turns_max, termination_reasons (list); only passing episodes are queued for "
        "annotation. null: not a teacher batch; {}: every completed episode passes",
    )
    capture_tokens = serializers.BooleanField(
        default=True,
        help_text="false for a server that returns no token ids (a hosted API): plain chat "
        "completions, calls recorded without tokens",
    )


class BatchSerializer(serializers.ModelSerializer[RolloutBatch]):
    benchmark_name = serializers.CharField(source="benchmark.name", read_only=True)
    policy_name = serializers.CharField(source="policy.name", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="finished episodes / total, 0 to 1")

    class Meta:
        model = RolloutBatch
        fields = [
            "id",
            "status",
            "benchmark",
            "benchmark_name",
            "policy",
            "policy_name",
            "ablation_label",
            "ablation",
            "samples_per_query",
            "max_turns",
            "termination_policy",
            "query_limit",
            "reward_weights",
            "teacher_rule",
            "capture_tokens",
            "episodes_total",
            "episodes_completed",
            "episodes_failed",
            "progress",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class BatchStatusSerializer(BatchSerializer):
    summary = serializers.SerializerMethodField()

    class Meta(BatchSerializer.Meta):
        fields = [*BatchSerializer.Meta.fields, "summary"]

    def get_summary(self, batch: RolloutBatch) -> dict[str, Any]:
        """Termination reasons, first errors and metric means over completed episodes; for a
        teacher batch, `teacher`: its rule, how many passed and failed, and failures per clause."""
        return dict(self.context.get("summary") or {})


class BatchCancelSerializer(serializers.Serializer[Any]):
    cancelled = serializers.IntegerField(help_text="pending episodes that will never start")
    status = serializers.CharField()


# --- ablation matrices ----------------------------------------------------------------------


class AblationMatrixCreateSerializer(serializers.Serializer[Any]):
    """Types only: the ranges, the policy and the rest are checked by
    services.ablations.ablation_matrix_create."""

    benchmark = RowIdField(queryset=Benchmark.objects.all())
    policy = serializers.CharField(default="baseline", help_text="an in-process policy by name")
    runs = serializers.IntegerField(default=1, help_text="1 to 20")
    query_limit = serializers.IntegerField(required=False, allow_null=True, default=None)
    max_turns = serializers.IntegerField(default=40, help_text="1 to 200")
    retriever = serializers.ChoiceField(
        choices=RetrieverKind.choices,
        default=RetrieverKind.BM25,
        help_text="what every condition's search tool ranks with",
    )
    conditions = serializers.ListField(
        child=ConditionField(),
        required=False,
        allow_null=True,
        default=None,
        help_text="condition names (minus_<mechanism>, ...); omitted or null runs all of them",
    )


class AblationMatrixSerializer(serializers.ModelSerializer[AblationMatrix]):
    benchmark_name = serializers.CharField(source="benchmark.name", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="finished episodes / total, 0 to 1")
    result = serializers.JSONField(
        help_text="once done, the `ablate --json` document: settings and a `conditions` list "
        "whose entries carry condition, n, runs and <metric>_mean / <metric>_std; else {}"
    )

    class Meta:
        model = AblationMatrix
        fields = [
            "id",
            "status",
            "benchmark",
            "benchmark_name",
            "policy",
            "retriever",
            "conditions",
            "runs",
            "query_limit",
            "max_turns",
            "episodes_total",
            "episodes_done",
            "progress",
            "error",
            "result",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


# --- evaluation runs ------------------------------------------------------------------------


class EvaluationRunCreateSerializer(serializers.Serializer[Any]):
    """Types and the counts' ranges (a count past its column's range once reached the
    INSERT); the rest is checked by services.evaluations.evaluation_create."""

    name = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    benchmarks = RowIdField(
        queryset=Benchmark.objects.all(), many=True, help_text="benchmark ids (the table's rows)"
    )
    policies = RowIdField(
        queryset=PolicyConfig.objects.all(), many=True, help_text="policy config ids"
    )
    conditions = serializers.ListField(
        child=ConditionField(),
        default=["full"],
        help_text="conditions (minus_<mechanism>, ...); each policy config runs under each",
    )
    runs = serializers.IntegerField(default=3, help_text="runs per cell, 1 to 20")
    query_limit = BoundedIntegerField(
        low=1,
        high=MAX_QUERY_LIMIT,
        required=False,
        allow_null=True,
        default=None,
        help_text="the first Q queries only",
    )
    max_turns = BoundedIntegerField(low=1, high=MAX_TURNS_LIMIT, default=40, help_text="1 to 200")


class EvaluationRunSerializer(serializers.ModelSerializer[EvaluationRun]):
    created_by = serializers.CharField(source="created_by.username", default=None)
    batches_total = serializers.IntegerField(help_text="one batch per cell and run")
    batches_finished = serializers.IntegerField()
    episodes_total = serializers.IntegerField(default=0)
    episodes_completed = serializers.IntegerField(default=0)
    episodes_failed = serializers.IntegerField(default=0)
    progress = serializers.SerializerMethodField(help_text="finished episodes / total, 0 to 1")

    class Meta:
        model = EvaluationRun
        fields = [
            "id",
            "name",
            "status",
            "benchmarks",
            "policies",
            "conditions",
            "runs",
            "query_limit",
            "max_turns",
            "batches_total",
            "batches_finished",
            "episodes_total",
            "episodes_completed",
            "episodes_failed",
            "progress",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_progress(self, evaluation: EvaluationRun) -> float:
        total = getattr(evaluation, "episodes_total", 0) or 0
        done = (getattr(evaluation, "episodes_completed", 0) or 0) + (
            getattr(evaluation, "episodes_failed", 0) or 0
        )
        return round(done / total, 4) if total else 0.0


class EvaluationConfigSerializer(serializers.Serializer[Any]):
    # `label` is added in get_fields: as a class attribute it would shadow Field.label.

    key = serializers.CharField(help_text='"<policy id>:<condition>", for compare\'s a and b')

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["label"] = serializers.CharField(help_text="policy config · condition")
        return fields


class EvaluationRunDetailSerializer(EvaluationRunSerializer):
    configs = serializers.SerializerMethodField()

    class Meta(EvaluationRunSerializer.Meta):
        fields = [*EvaluationRunSerializer.Meta.fields, "configs"]

    @extend_schema_field(EvaluationConfigSerializer(many=True))
    def get_configs(self, evaluation: EvaluationRun) -> list[dict[str, str]]:
        """The run's configurations (policy config x condition): the table's columns."""
        return list(self.context.get("configs") or [])


class EvaluationTableSerializer(serializers.Serializer[Any]):
    metrics = serializers.ListField(child=serializers.CharField())
    columns = serializers.ListField(child=serializers.CharField(), help_text="metric labels")
    rows = serializers.ListField(
        child=serializers.DictField(),
        help_text="one per benchmark x configuration: benchmark, config, config_key, runs, n "
        "(queries per run), failed (episodes), cells (mean ± std per metric) and values "
        "({metric: {mean, std, runs}} or null)",
    )


class EvaluationCompareQuerySerializer(serializers.Serializer[Any]):
    a = serializers.CharField(help_text="configuration key of A (the reference)")
    b = serializers.CharField(help_text="configuration key of B; the difference is B - A")
    metric = serializers.ChoiceField(choices=list(EVALUATION_METRICS), default="curated_recall")
    benchmark = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, help_text="one benchmark; omitted: all"
    )


class EvaluationCompareSerializer(serializers.Serializer[Any]):
    metric = serializers.CharField()
    metric_label = serializers.CharField()
    a = EvaluationConfigSerializer()
    b = EvaluationConfigSerializer()
    benchmark = serializers.CharField(allow_null=True)
    comparison = serializers.DictField(
        allow_null=True,
        help_text="n (paired queries), mean_a, mean_b, mean_difference (B - A), ci_low, "
        "ci_high (percentile bootstrap), confidence, resamples, seed, wins, ties, losses; "
        "null when the two share no completed query",
    )


class EvaluationTransferQuerySerializer(serializers.Serializer[Any]):
    metric = serializers.ChoiceField(choices=list(EVALUATION_METRICS), default="curated_recall")


class EvaluationTransferSerializer(serializers.Serializer[Any]):
    metric = serializers.CharField()
    metric_label = serializers.CharField()
    configs = EvaluationConfigSerializer(many=True)
    rows = serializers.ListField(
        child=serializers.DictField(),
        help_text="one per benchmark: benchmark and cells, one {mean, std, runs} or null per "
        "configuration",
    )


class EvaluationCancelSerializer(serializers.Serializer[Any]):
    cancelled = serializers.IntegerField(help_text="pending episodes that will never start")
    status = serializers.CharField()


# --- episodes -------------------------------------------------------------------------------


# A failed or cancelled episode was never scored: these are null (services/rollouts.py).
SCORES = ("reward", "curated_recall", "trajectory_recall", "final_answer_recall", "tool_diversity")
UNSCORED = {"help_text": "null for a failed or cancelled episode, and until one completes"}


class EpisodeSerializer(serializers.ModelSerializer[Episode]):
    # Recorded episodes have no batch or query: these read as null for them.
    benchmark = serializers.IntegerField(
        source="batch.benchmark_id", read_only=True, allow_null=True
    )
    policy = serializers.IntegerField(source="batch.policy_id", read_only=True, allow_null=True)
    query_external_id = serializers.CharField(
        source="query.external_id", read_only=True, allow_null=True
    )
    question = serializers.CharField(source="query.text", read_only=True, allow_null=True)

    class Meta:
        model = Episode
        fields = [
            "id",
            "kind",
            "batch",
            "group",
            "benchmark",
            "policy",
            "query",
            "query_external_id",
            "question",
            "sample_index",
            "status",
            "termination_reason",
            "reward",
            "curated_recall",
            "trajectory_recall",
            "final_answer_recall",
            "tool_diversity",
            "turns",
            "format_errors",
            "annotation_status",
            "annotation_count",
            "policy_version",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "sample_index": {"help_text": '0-based; the pages call sample_index 0 "sample 1"'},
            **dict.fromkeys(SCORES, UNSCORED),
        }


class TurnSerializer(serializers.ModelSerializer[Turn]):
    state = serializers.SerializerMethodField()

    class Meta:
        model = Turn
        fields = [
            "index",
            "tool_calls",
            "observation",
            "state",
            "curated_recall",
            "trajectory_recall",
            "final_answer_recall",
            "format_errors",
            "harness_ms",
            "policy_ms",
        ]
        read_only_fields = fields
        extra_kwargs = {"index": {"help_text": "0: the start (no calls); then turns 1, 2, …"}}

    def get_state(self, turn: Turn) -> dict[str, Any]:
        """The full harness state after this turn (deltas applied)."""
        states: list[dict[str, Any]] = self.context["states"]
        return states[turn.index] if turn.index < len(states) else {}


class ModelCallSerializer(serializers.ModelSerializer[ModelCall]):
    prompt_token_ids = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    completion_token_ids = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    completion_logprobs = serializers.ListField(child=serializers.FloatField(), read_only=True)

    class Meta:
        model = ModelCall
        fields = [
            "id",
            "turn_index",
            "request",
            "response",
            "prompt_token_ids",
            "completion_token_ids",
            "completion_logprobs",
            "finish_reason",
            "usage",
            "latency_ms",
            "policy_version",
            "error",
            "created_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "turn_index": {"help_text": "the turn answered; pages number calls 1, 2, …"}
        }


class EpisodeDetailSerializer(EpisodeSerializer):
    turn_rows = serializers.SerializerMethodField()
    model_calls = serializers.SerializerMethodField()

    class Meta(EpisodeSerializer.Meta):
        fields = [
            *EpisodeSerializer.Meta.fields,
            "attempts",
            "error",
            "metrics",
            "reward_components",
            "timings",
            "turn_rows",
            "model_calls",
        ]
        read_only_fields = fields

    def get_turn_rows(self, episode: Episode) -> list[dict[str, Any]]:
        turns = self.context["turns"]
        return list(TurnSerializer(turns, many=True, context=self.context).data)

    def get_model_calls(self, episode: Episode) -> list[dict[str, Any]]:
        return list(ModelCallSerializer(self.context["calls"], many=True).data)


def episode_trajectory_data(*, episode: Episode, context: dict[str, Any] | None = None) -> Any:
    """The whole trajectory of an episode: turns with their harness states (curated set,
    pool), rewards and metrics, and every model call with its token ids.

    One shape for `GET /api/episodes/<id>/` and the viewer's "Download trajectory JSON".
    """
    detail_context = {
        **(context or {}),
        "states": turn_states(episode=episode),
        "turns": list(Turn.objects.filter(episode=episode).defer("state").order_by("index")),
        "calls": list(ModelCall.objects.filter(episode=episode).order_by("turn_index", "pk")),
    }
    return EpisodeDetailSerializer(episode, context=detail_context).data


# --- annotations ----------------------------------------------------------------------------


class AnnotationSerializer(serializers.ModelSerializer[Annotation]):
    annotator = serializers.CharField(source="annotator.username", read_only=True)

    class Meta:
        model = Annotation
        fields = [
            "id",
            "episode",
            "annotator",
            "label",
            "reason",
            "notes",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class AnnotationCreateSerializer(serializers.Serializer[Any]):
    episode = RowIdField(queryset=Episode.objects.all())
    label = serializers.ChoiceField(choices=AnnotationLabel.choices)  # type: ignore[assignment]
    reason = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    notes = serializers.CharField(required=False, default="", allow_blank=True)


class AnnotationNextSerializer(serializers.Serializer[Any]):
    overlap = serializers.IntegerField(
        min_value=1,
        max_value=MAX_OVERLAP,
        required=False,
        help_text="distinct annotators wanted per episode (default: ANNOTATION_OVERLAP)",
    )
    filters = serializers.DictField(default=dict, help_text="episode filters, as for the list")


class AssignmentSerializer(serializers.Serializer[Any]):
    episode = EpisodeSerializer()
    expires_at = serializers.DateTimeField()


class BulkPreviewSerializer(serializers.Serializer[Any]):
    filters = serializers.DictField(default=dict)


class BulkApplySerializer(BulkPreviewSerializer):
    label = serializers.ChoiceField(choices=AnnotationLabel.choices)  # type: ignore[assignment]
    reason = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    every_episode = serializers.BooleanField(
        required=False,
        default=False,
        help_text="with no filters, label every finished episode; without it, no filters is "
        "refused",
    )


class BulkCountSerializer(serializers.Serializer[Any]):
    episodes = serializers.IntegerField()


class BulkActionSerializer(serializers.ModelSerializer[AnnotationBulkAction]):
    actor = serializers.CharField(source="actor.username", default=None, allow_null=True)

    class Meta:
        model = AnnotationBulkAction
        fields = [
            "id",
            "actor",
            "filters",
            "label",
            "reason",
            "episodes",
            "created_at",
            "undone_at",
        ]
        read_only_fields = fields


class BulkUndoSerializer(serializers.Serializer[Any]):
    restored = serializers.IntegerField(help_text="episodes whose label went back")


class KappaPairSerializer(serializers.Serializer[Any]):
    annotators = serializers.ListField(child=serializers.IntegerField())
    episodes = serializers.IntegerField()
    kappa = serializers.FloatField(allow_null=True)


class FleissSerializer(serializers.Serializer[Any]):
    raters = serializers.IntegerField()
    episodes = serializers.IntegerField()
    kappa = serializers.FloatField(allow_null=True)


class AgreementSerializer(serializers.Serializer[Any]):
    cohen = KappaPairSerializer(many=True)
    fleiss = FleissSerializer()


class RewardHackingSerializer(EpisodeSerializer):
    rejections = serializers.IntegerField(read_only=True)

    class Meta(EpisodeSerializer.Meta):
        fields = [*EpisodeSerializer.Meta.fields, "rejections"]
        read_only_fields = fields
