"""Every write to rollouts: creating batches, running episodes, recording turns and calls.

An episode runs at least once and completes exactly once. `episode_claim` takes it (bumping
`attempts`) and wipes what an earlier, crashed attempt left; turns and model calls are then
written as they happen; `episode_finish` writes the final-state rows, the metrics and the
batch progress in one transaction that first checks the attempt still owns the episode.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from harness_app import jobs, queues
from harness_app.harness import jsondelta
from harness_app.harness.ablation import Ablation
from harness_app.harness.llm.client import ModelCallRecord
from harness_app.harness.metrics import EpisodeMetrics
from harness_app.harness.reward import RewardBreakdown, RewardWeights
from harness_app.harness.runner import TurnRecord
from harness_app.harness.state import HarnessState, HarnessStateJson
from harness_app.models import Benchmark, PolicyConfig, PolicyKind, VerifierKind
from trajectories.models import (
    FAILED_REASONS,
    FINISHED_EPISODE,
    UNSCORED_EPISODE,
    BatchStatus,
    Episode,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    RolloutGroup,
    TerminationPolicy,
    Turn,
    VerifierCall,
)
from trajectories.services.final_states import final_state_record
from trajectories.services.model_calls import model_call_record_columns, model_calls_create
from trajectories.teacher_rule import (
    TeacherRuleError,
    teacher_rule_clean,
    teacher_rule_failures,
)

log = logging.getLogger(__name__)

MAX_SAMPLES_PER_QUERY = 64
MAX_TURNS_LIMIT = 200
MAX_QUERY_LIMIT = 10_000_000
# Termination reasons that mean the infrastructure failed, not that the policy stopped.
FAILURE_REASONS = frozenset(FAILED_REASONS)


class BatchParameterError(ValueError):
    """A batch request that cannot run; the message names the parameter and the fix.

    `field` is the `batch_create` keyword at fault, for forms and the API to show the
    message on; None when no one keyword is.
    """

    def __init__(self, message: str, *, field: str | None) -> None:
        super().__init__(message)
        self.field = field


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise BatchParameterError(
            f"{name} must be between {low} and {high}, got {value}", field=name
        )


def rollout_queue(policy: PolicyConfig) -> str:
    """Baseline episodes are CPU-bound; LLM episodes wait on vLLM, so they get their own
    queue served by a thread-pool worker with high concurrency. So does a baseline whose
    verifier or reranker is a model: it waits on a server too."""
    waits = policy.kind != PolicyKind.BASELINE or policy.verifier == VerifierKind.LLM
    return queues.ROLLOUTS_LLM if waits or policy.reranker_model else queues.ROLLOUTS


@transaction.atomic
def batch_create(
    *,
    benchmark: Benchmark,
    policy: PolicyConfig,
    created_by: Any = None,
    samples_per_query: int = 1,
    max_turns: int = 40,
    termination_policy: str = TerminationPolicy.MAX_TURNS,
    ablate: Sequence[str] = (),
    query_limit: int | None = None,
    reward_weights: dict[str, Any] | None = None,
    prefixes: dict[str, list[dict[str, Any]]] | None = None,
    query_ids: Sequence[int] | None = None,
    teacher_rule: Mapping[str, Any] | None = None,
    capture_tokens: bool = True,
) -> RolloutBatch:
    """Create a batch with one group per query and one episode per sample; enqueue on commit.

    With `prefixes` (query external id → starting messages), the batch runs exactly those
    queries, each episode starting from its conversation. With `query_ids` (Query pks of
    the benchmark), it runs exactly those, as an RL step samples its slice of the split.
    With `teacher_rule` (teacher_rule.py; {} passes every completed episode) it is a
    teacher batch: only its completed episodes that pass the rule enter the annotation
    queue. `capture_tokens=False` is for a server that returns no token ids.
    """
    _check_range("samples_per_query", samples_per_query, 1, MAX_SAMPLES_PER_QUERY)
    _check_range("max_turns", max_turns, 1, MAX_TURNS_LIMIT)
    if termination_policy not in TerminationPolicy.values:
        raise BatchParameterError(
            f"termination_policy {termination_policy!r} is not one of {TerminationPolicy.values}",
            field="termination_policy",
        )
    if query_limit is not None:
        _check_range("query_limit", query_limit, 1, MAX_QUERY_LIMIT)
    try:
        ablation = Ablation().without(*ablate)
    except (ValueError, TypeError) as exc:
        raise BatchParameterError(str(exc), field="ablate") from exc
    try:
        weights = RewardWeights.from_json(reward_weights or {})
    except (ValueError, TypeError) as exc:
        raise BatchParameterError(str(exc), field="reward_weights") from exc
    rule = None
    if teacher_rule is not None:
        try:
            rule = teacher_rule_clean(teacher_rule)
        except TeacherRuleError as exc:
            raise BatchParameterError(str(exc), field="teacher_rule") from exc
    if not capture_tokens and policy.kind == PolicyKind.BASELINE:
        raise BatchParameterError(
            "capture_tokens only applies to an OpenAI-compatible policy", field="capture_tokens"
        )
    queries = _batch_queries(benchmark, policy, prefixes)
    if query_ids is not None:
        queries = _only_queries(benchmark, queries, query_ids)
    queries = queries[:query_limit]
    if not queries:
        raise BatchParameterError(
            f"benchmark {benchmark.name!r} has no queries to run", field="benchmark"
        )
    batch = RolloutBatch.objects.create(
        benchmark=benchmark,
        policy=policy,
        ablation=ablation.to_json(),
        ablation_label=ablation.label,
        samples_per_query=samples_per_query,
        max_turns=max_turns,
        termination_policy=termination_policy,
        query_limit=query_limit,
        reward_weights=weights.to_json(),
        teacher_rule=rule,
        capture_tokens=capture_tokens,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        episodes_total=len(queries) * samples_per_query,
    )
    groups = RolloutGroup.objects.bulk_create(
        RolloutGroup(batch=batch, query_id=pk, prefix_messages=(prefixes or {}).get(ext, []))
        for pk, ext in queries
    )
    Episode.objects.bulk_create(
        Episode(group=g, batch=batch, query_id=g.query_id, sample_index=s)
        for g in groups
        for s in range(samples_per_query)
    )
    jobs.send(batch, lambda: batch_enqueue(batch_id=batch.pk))
    return batch


def _batch_queries(
    benchmark: Benchmark, policy: PolicyConfig, prefixes: dict[str, Any] | None
) -> list[tuple[int, str]]:
    rows = benchmark.queries.order_by("pk").values_list("pk", "external_id")
    if prefixes is None:
        return list(rows)
    if policy.kind == PolicyKind.BASELINE:
        raise BatchParameterError(
            "message prefixes need an OpenAI-compatible policy", field="prefixes"
        )
    found = list(rows.filter(external_id__in=list(prefixes)))
    missing = sorted(set(prefixes) - {ext for _, ext in found})
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise BatchParameterError(
            f"{len(missing)} prefix query ids are not in benchmark {benchmark.name!r}: {shown}",
            field="prefixes",
        )
    return found


def _only_queries(
    benchmark: Benchmark, queries: list[tuple[int, str]], query_ids: Sequence[int]
) -> list[tuple[int, str]]:
    wanted = set(query_ids)
    kept = [q for q in queries if q[0] in wanted]
    if len(kept) != len(wanted):
        missing = sorted(wanted - {pk for pk, _ in kept})
        raise BatchParameterError(
            f"query ids {missing[:5]} are not queries of benchmark {benchmark.name!r}",
            field="query_ids",
        )
    return kept


def batch_enqueue(*, batch_id: int) -> int:
    """Send one task per pending episode of the batch; returns how many were sent.

    Raises kombu's OperationalError when the broker is down: callers send through the job
    kernel (`jobs.send`, `jobs.send_now`), which fails the batch saying so; its episodes
    stay pending, and `batch_resend` sends them once the broker is back."""
    batch = RolloutBatch.objects.select_related("policy").get(pk=batch_id)
    queue = rollout_queue(batch.policy)
    ids = list(
        Episode.objects.filter(batch_id=batch_id, status=EpisodeStatus.PENDING).values_list(
            "pk", flat=True
        )
    )
    for episode_id in ids:
        queues.enqueue(queues.EPISODE_RUN, episode_id, queue=queue)
    return len(ids)


@transaction.atomic
def batch_cancel(*, batch: RolloutBatch) -> int:
    """Cancel a batch: pending episodes never start, running ones stop after their turn."""
    batch = RolloutBatch.objects.select_for_update().get(pk=batch.pk)
    if batch.status in (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED):
        return 0
    now = timezone.now()
    cancelled = Episode.objects.filter(batch=batch, status=EpisodeStatus.PENDING).update(
        status=EpisodeStatus.CANCELLED, termination_reason="cancelled", finished_at=now
    )
    RolloutBatch.objects.filter(pk=batch.pk).update(
        episodes_failed=F("episodes_failed") + cancelled
    )
    batch.refresh_from_db(fields=["episodes_failed"])
    jobs.finish(batch, BatchStatus.CANCELLED, running_only=False)
    return cancelled


@transaction.atomic
def groups_cancel(*, group_ids: Sequence[int]) -> int:
    """Cancel the pending episodes of some groups (the rollout service's stragglers); a
    running episode plays on. Returns how many were cancelled."""
    pending = Episode.objects.select_for_update(skip_locked=True).filter(
        group_id__in=list(group_ids), status=EpisodeStatus.PENDING
    )
    rows = list(pending.values_list("pk", "batch_id"))
    Episode.objects.filter(pk__in=[pk for pk, _ in rows]).update(
        status=EpisodeStatus.CANCELLED, termination_reason="cancelled", finished_at=timezone.now()
    )
    for batch_id in {b for _, b in rows if b is not None}:
        _batch_progress(batch_id=batch_id, ok=False, count=sum(b == batch_id for _, b in rows))
    return len(rows)


def stale_after() -> timedelta:
    return timedelta(seconds=settings.EPISODE_STALE_AFTER_S)


@dataclass(frozen=True)
class Claim:
    episode: Episode
    attempt: int


@transaction.atomic
def episode_claim(*, episode_id: int) -> Claim | None:
    """Take the episode for this attempt, or None when it is finished or held elsewhere."""
    episode = Episode.objects.select_for_update().filter(pk=episode_id).first()
    if episode is None or episode.status in FINISHED_EPISODE:
        return None
    now = timezone.now()
    alive = episode.heartbeat_at and now - episode.heartbeat_at < stale_after()
    if episode.status == EpisodeStatus.RUNNING and alive:
        return None
    # What a crashed attempt wrote is discarded: the episode restarts from turn 0.
    Turn.objects.filter(episode=episode).delete()
    ModelCall.objects.filter(episode=episode).delete()
    VerifierCall.objects.filter(episode=episode).delete()
    episode.status = EpisodeStatus.RUNNING
    episode.attempts += 1
    episode.started_at = episode.heartbeat_at = now
    episode.error = ""
    episode.save(update_fields=["status", "attempts", "started_at", "heartbeat_at", "error"])
    assert episode.batch_id is not None  # a claimed episode is a rollout
    RolloutBatch.objects.filter(pk=episode.batch_id, status=BatchStatus.QUEUED).update(
        status=BatchStatus.RUNNING
    )
    return Claim(episode=episode, attempt=episode.attempts)


SNAPSHOT_EVERY = 10


def episode_release(*, claim: Claim) -> None:
    """Give the episode back (pending) after a retryable failure, so the retried task can
    claim it at once instead of waiting for this attempt's heartbeat to go stale."""
    Episode.objects.filter(
        pk=claim.episode.pk, status=EpisodeStatus.RUNNING, attempts=claim.attempt
    ).update(status=EpisodeStatus.PENDING, heartbeat_at=None)


def turn_record(
    *,
    claim: Claim,
    turn: TurnRecord,
    previous_state: HarnessStateJson | None = None,
) -> None:
    """Persist one turn and the model calls made for it (`turn.calls.model`), and beat the
    heartbeat.

    With `previous_state` (the last turn's snapshot), the state is stored as a delta except
    on every SNAPSHOT_EVERY-th turn, which bounds how many deltas a reader applies.
    """
    recall = turn.recall
    state: Mapping[str, Any] = turn.state
    as_delta = previous_state is not None and turn.turn % SNAPSHOT_EVERY != 0
    if previous_state is not None and as_delta:
        state = jsondelta.diff(previous_state, turn.state)
    with transaction.atomic():
        _relax_durability()
        Turn.objects.create(
            episode=claim.episode,
            index=turn.turn,
            tool_calls=turn.tool_calls,
            tool_results=turn.tool_results,
            observation=turn.observation_text,
            state=state,
            state_is_delta=as_delta,
            curated_recall=recall.curated,
            trajectory_recall=recall.trajectory,
            final_answer_recall=recall.final_answer,
            format_errors=turn.state["format_errors"],
            harness_ms=turn.env_seconds * 1000,
            policy_ms=turn.policy_seconds * 1000,
        )
        model_calls_record(claim=claim, calls=turn.calls.model)
        Episode.objects.filter(pk=claim.episode.pk).update(heartbeat_at=timezone.now())


def _relax_durability() -> None:
    """Skip the WAL flush wait for per-turn rows on PostgreSQL.

    A turn row lost to a database crash costs nothing: the episode's heartbeat goes stale
    and the episode re-runs from turn 0 anyway. The commit that finishes an episode keeps
    full durability.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def model_calls_record(*, claim: Claim, calls: Sequence[tuple[int, ModelCallRecord]]) -> None:
    model_calls_create(
        rows=(
            model_call_record_columns(
                episode_id=claim.episode.pk, turn_index=turn_index, record=record
            )
            for turn_index, record in calls
        )
    )


def episode_is_cancelled(*, claim: Claim) -> bool:
    batch_id = claim.episode.batch_id
    assert batch_id is not None  # a claimed episode is a rollout
    return RolloutBatch.objects.filter(pk=batch_id, status=BatchStatus.CANCELLED).exists()


class EpisodeTimings(TypedDict):
    """Seconds per stage of one run, as `Episode.timings` stores them."""

    setup_s: float  # building the retriever, the harness and the policy
    episode_s: float  # from the start of setup to the end of the last turn


@dataclass(frozen=True)
class EpisodeOutcome:
    """How an episode ended. A worker that gave up before scoring has no metrics, reward,
    timings or state: the episode is stored with empty metrics and no reward."""

    termination_reason: str
    policy_version: str
    metrics: EpisodeMetrics | None = None
    reward: RewardBreakdown | None = None
    timings: EpisodeTimings | None = None
    state: HarnessState | None = None  # for the final-state rows
    error: str = ""
    # The reader's answer and its scores (reader.answer_fields), merged into the metrics.
    answer: dict[str, Any] | None = None


@transaction.atomic
def episode_finish(*, claim: Claim, outcome: EpisodeOutcome) -> bool:
    """Record the end of an episode exactly once; False when this attempt lost ownership."""
    episode = Episode.objects.select_for_update().get(pk=claim.episode.pk)
    if episode.status != EpisodeStatus.RUNNING or episode.attempts != claim.attempt:
        return False
    failed = outcome.termination_reason in FAILURE_REASONS
    if outcome.termination_reason == "cancelled":
        status = EpisodeStatus.CANCELLED
    else:
        status = EpisodeStatus.FAILED if failed else EpisodeStatus.COMPLETED
    scored = status not in UNSCORED_EPISODE
    reward = outcome.reward if scored else None
    columns = _metric_columns(outcome.metrics, scored=scored)
    if outcome.answer and scored:
        columns["metrics"] = {**columns["metrics"], **outcome.answer}
    assert episode.batch_id is not None  # a claimed episode is a rollout
    batches = RolloutBatch.objects.filter(pk=episode.batch_id)
    rule = batches.values_list("teacher_rule", flat=True).get()
    verdict: dict[str, Any] = {}
    if rule is not None and status == EpisodeStatus.COMPLETED:
        # A teacher batch: the rule fixed at its creation decides the annotation queue.
        unmet = teacher_rule_failures(
            rule, {**columns, "termination_reason": outcome.termination_reason}
        )
        verdict = {"teacher_passed": not unmet, "teacher_failures": unmet}
    Episode.objects.filter(pk=episode.pk).update(
        status=status,
        termination_reason=outcome.termination_reason,
        error=outcome.error,
        reward=reward.total if reward else None,
        reward_components=reward.to_json() if reward else {},
        timings=outcome.timings or {},
        policy_version=outcome.policy_version,
        finished_at=timezone.now(),
        **columns,
        **verdict,
    )
    if outcome.state is not None:
        final_state_record(episode=episode, state=outcome.state)
    _batch_progress(batch_id=episode.batch_id, ok=status == EpisodeStatus.COMPLETED)
    return True


def episode_fail(*, episode_id: int, reason: str, message: str) -> None:
    """End a running episode whose worker gave up on it (an error, the time limit) as
    failed, with the message; an episode that is no longer running is left alone."""
    with transaction.atomic():
        episode = Episode.objects.select_for_update().filter(pk=episode_id).first()
        if episode is None or episode.status != EpisodeStatus.RUNNING:
            return
        outcome = EpisodeOutcome(termination_reason=reason, policy_version="", error=message)
        episode_finish(claim=Claim(episode=episode, attempt=episode.attempts), outcome=outcome)


def _metric_columns(metrics: EpisodeMetrics | None, *, scored: bool) -> dict[str, Any]:
    """The metrics JSON and the columns copied out of it for filtering and sorting.

    An unscored episode (failed or cancelled: the run broke off, so the state it left says
    nothing about the policy) keeps only its counts, turns and format errors; its recalls
    and tool diversity are null, which every page shows as "—", the min/max filters skip
    and the means leave out. Before this rule they were stored as measured, mostly 0.
    """
    if metrics is None or not scored:
        return {
            "metrics": {},
            "curated_recall": None,
            "trajectory_recall": None,
            "final_answer_recall": None,
            "tool_diversity": None,
            "turns": metrics.turns if metrics else 0,
            "format_errors": metrics.format_errors if metrics else 0,
        }
    return {
        "metrics": metrics.to_json(),
        "curated_recall": metrics.curated_recall,
        "trajectory_recall": metrics.trajectory_recall,
        "final_answer_recall": metrics.final_answer_recall,
        "tool_diversity": metrics.tool_diversity,
        "turns": metrics.turns,
        "format_errors": metrics.format_errors,
    }


def _batch_progress(*, batch_id: int, ok: bool, count: int = 1) -> None:
    field = "episodes_completed" if ok else "episodes_failed"
    RolloutBatch.objects.filter(pk=batch_id).update(**{field: F(field) + count})
    done = Q(episodes_completed__gt=0) | Q(episodes_failed__gt=0)
    finished = RolloutBatch.objects.filter(
        done,
        pk=batch_id,
        status__in=[BatchStatus.QUEUED, BatchStatus.RUNNING],
        episodes_total__lte=F("episodes_completed") + F("episodes_failed"),
    )
    for batch in finished.select_for_update():
        # Its owners (an evaluation, an RL job) hear of it through jobs.finished.
        status = BatchStatus.FAILED if batch.episodes_failed else BatchStatus.COMPLETED
        jobs.finish(batch, status, running_only=False)
