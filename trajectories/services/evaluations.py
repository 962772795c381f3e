"""Every write to evaluation runs: create one (its batches created and queued), finish, cancel.

An evaluation run is benchmarks x policy configs x ablation conditions x R runs. Each cell-run
is an ordinary rollout batch (`rollouts.batch_create`, one sample per query), tagged with its
evaluation, condition and run index, so the rollout workers run it like any other batch: the
baseline on the `rollouts` queue, model policies on `rollouts_llm`. Everything is written in
one transaction and the batches' episodes are sent once it commits; a refused parameter
leaves nothing behind. The run is done when its last batch finishes: it subscribes to the
job kernel's `finished` signal for batches (harness_app/jobs.py), so rollouts.py, which
this module builds on, never calls up into it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone

from harness_app import jobs
from harness_app.harness.ablation import REFERENCE_CONDITIONS, condition_name
from harness_app.models import Benchmark, PolicyConfig
from trajectories.models import BatchStatus, EvaluationRun, EvaluationStatus, RolloutBatch
from trajectories.services import rollouts

MAX_RUNS = 20
# Batches one evaluation run may create (cells x runs): past this, split it.
MAX_BATCHES = 400
ACTIVE_BATCH = (BatchStatus.QUEUED, BatchStatus.RUNNING)


class EvaluationParameterError(ValueError):
    """An evaluation request that cannot run; `field` names the `evaluation_create` keyword
    at fault, for forms and the API to show the message on."""

    def __init__(self, message: str, *, field: str | None) -> None:
        super().__init__(message)
        self.field = field


def _distinct(items: Sequence[Any], field: str) -> list[Any]:
    chosen = list(dict.fromkeys(items))
    if not chosen:
        raise EvaluationParameterError(f"choose at least one of {field}", field=field)
    return chosen


def _check(
    benchmarks: Sequence[Benchmark],
    policies: Sequence[PolicyConfig],
    conditions: Sequence[str],
    runs: int,
    counts: dict[str, tuple[int | None, int]],
) -> None:
    # Before any row is written: an out-of-range count once reached the INSERT (a -1 broke
    # the column's check, 2^63 overflowed it) before the batches' own checks ran.
    for field, (value, most) in counts.items():
        if value is not None and not 1 <= value <= most:
            raise EvaluationParameterError(
                f"{field} must be between 1 and {most}, got {value}", field=field
            )
    unknown = [c for c in conditions if c not in REFERENCE_CONDITIONS]
    if unknown:
        raise EvaluationParameterError(
            f"unknown condition(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(REFERENCE_CONDITIONS)}",
            field="conditions",
        )
    if not 1 <= runs <= MAX_RUNS:
        raise EvaluationParameterError(
            f"runs must be between 1 and {MAX_RUNS}, got {runs}", field="runs"
        )
    batches = len(benchmarks) * len(policies) * len(conditions) * runs
    if batches > MAX_BATCHES:
        raise EvaluationParameterError(
            f"{len(benchmarks)} benchmark(s) x {len(policies)} policy config(s) x "
            f"{len(conditions)} condition(s) x {runs} run(s) is {batches} batches; "
            f"at most {MAX_BATCHES} per evaluation run",
            field=None,
        )


@transaction.atomic
def evaluation_create(
    *,
    benchmarks: Sequence[Benchmark],
    policies: Sequence[PolicyConfig],
    conditions: Sequence[str] = ("full",),
    runs: int = 3,
    query_limit: int | None = None,
    max_turns: int = 40,
    name: str = "",
    created_by: Any = None,
) -> EvaluationRun:
    """Write the run and one batch per benchmark x policy x condition x run; their episodes
    are queued once committed. Every batch of a benchmark runs the same first queries, so
    configurations are compared on the same queries."""
    benchmarks = _distinct(benchmarks, "benchmarks")
    policies = _distinct(policies, "policies")
    conditions = _distinct([condition_name(c) for c in conditions], "conditions")
    counts = {
        "max_turns": (max_turns, rollouts.MAX_TURNS_LIMIT),
        "query_limit": (query_limit, rollouts.MAX_QUERY_LIMIT),
    }
    _check(benchmarks, policies, conditions, runs, counts)
    user = created_by if getattr(created_by, "pk", None) else None
    evaluation = EvaluationRun.objects.create(
        name=name,
        conditions=conditions,
        runs=runs,
        query_limit=query_limit,
        max_turns=max_turns,
        created_by=user,
    )
    evaluation.benchmarks.set(benchmarks)
    evaluation.policies.set(policies)
    for benchmark in benchmarks:
        for policy in policies:
            for condition in conditions:
                for run_index in range(runs):
                    batch = _batch(benchmark, policy, condition, evaluation, user)
                    RolloutBatch.objects.filter(pk=batch.pk).update(
                        evaluation=evaluation,
                        evaluation_condition=condition,
                        evaluation_run_index=run_index,
                    )
    return evaluation


def _batch(
    benchmark: Benchmark,
    policy: PolicyConfig,
    condition: str,
    evaluation: EvaluationRun,
    user: Any,
) -> RolloutBatch:
    try:
        return rollouts.batch_create(
            benchmark=benchmark,
            policy=policy,
            ablate=REFERENCE_CONDITIONS[condition].disabled,
            query_limit=evaluation.query_limit,
            max_turns=evaluation.max_turns,
            created_by=user,
        )
    except rollouts.BatchParameterError as exc:
        # The batch keywords an evaluation passes on, under the evaluation's names.
        fields = {"benchmark": "benchmarks", "max_turns": "max_turns", "query_limit": "query_limit"}
        raise EvaluationParameterError(str(exc), field=fields.get(exc.field or "")) from None


@receiver(jobs.finished, sender=RolloutBatch)
def _batch_finished(*, job: RolloutBatch, **_: object) -> None:
    if job.evaluation_id is not None:
        evaluation_batch_finished(evaluation_id=job.evaluation_id)


@transaction.atomic
def evaluation_batch_finished(*, evaluation_id: int) -> bool:
    """Mark the run done once none of its batches is queued or running; True when it did.

    Called as each of its batches finishes (jobs.finished), inside the transaction that
    finishes it. The run's row is locked first, so two batches finishing at once cannot
    each see the other still running: the second waits, then reads the first's committed
    status. The batch is locked before this (batch, then run), the one order every path
    takes.
    """
    evaluation = EvaluationRun.objects.select_for_update().filter(pk=evaluation_id).first()
    if evaluation is None or evaluation.is_finished:
        return False
    active = RolloutBatch.objects.filter(evaluation_id=evaluation_id, status__in=ACTIVE_BATCH)
    if active.exists():
        return False
    return jobs.finish(evaluation)


@transaction.atomic
def evaluation_cancel(*, evaluation: EvaluationRun) -> int:
    """Cancel every unfinished batch of the run; returns the episodes that will not start.

    The run's row is not locked up front: each batch is locked before the run (through
    `batch_cancel`), in the order a finishing batch takes them, so the two never deadlock.
    """
    evaluation.refresh_from_db()
    if evaluation.is_finished:
        return 0
    cancelled = sum(
        rollouts.batch_cancel(batch=batch)
        for batch in evaluation.batches.filter(status__in=ACTIVE_BATCH)
    )
    EvaluationRun.objects.filter(pk=evaluation.pk).update(
        status=EvaluationStatus.CANCELLED, finished_at=timezone.now()
    )
    return cancelled
