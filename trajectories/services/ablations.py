"""Every write to ablation matrices: create one (checked, queued on commit) and run it.

A matrix runs Harness-1's named conditions x N runs of an in-process policy over the first
Q judged queries of a benchmark, in one worker process, through the same library function
as `python -m harness_app.harness ablate` (`harness_app.harness.ablation_matrix.matrix_run`). Its
progress (episodes done of total) is written to the row as it goes; the result is written
once, together with the status `done`, so no reader ever sees half a result. Any failure
marks the row `failed` with a message and leaves the result empty. A run that a crashed
worker left `running` is redone from the start when its task is delivered again, or failed
by the job kernel's recovery (harness_app/jobs.py) when a worker starts and none holds it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from harness_app import jobs, queues
from harness_app.harness.ablation import REFERENCE_CONDITIONS, reference_conditions
from harness_app.harness.ablation_matrix import Progress, matrix_report, matrix_run
from harness_app.harness.config import HarnessConfig
from harness_app.harness.policies import POLICY_FACTORIES
from harness_app.harness.retrieval.hybrid import RETRIEVERS
from harness_app.harness.types import QuerySpec
from harness_app.models import Benchmark, Qrel
from trajectories.models import AblationMatrix, MatrixStatus

log = logging.getLogger(__name__)

MAX_RUNS = 20
MAX_TURNS_LIMIT = 200
# Progress is written at most this often (and always for the last episode).
PROGRESS_EVERY_S = 0.5


class MatrixParameterError(ValueError):
    """A matrix request that cannot run; `field` names the `ablation_matrix_create` keyword
    at fault, for forms and the API to show the message on."""

    def __init__(self, message: str, *, field: str | None) -> None:
        super().__init__(message)
        self.field = field


def matrix_policies() -> list[str]:
    """The policies a matrix can run: those the harness builds in-process, without a model."""
    return sorted(POLICY_FACTORIES)


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise MatrixParameterError(
            f"{name} must be between {low} and {high}, got {value}", field=name
        )


def _judged_queries(benchmark: Benchmark) -> Any:
    """The benchmark's queries with judgements, in import order (the command's `beir_queries`)."""
    return benchmark.queries.filter(qrels__isnull=False).distinct().order_by("pk")


@transaction.atomic
def ablation_matrix_create(
    *,
    benchmark: Benchmark,
    policy: str = "baseline",
    runs: int = 1,
    query_limit: int | None = None,
    conditions: Sequence[str] | None = None,
    max_turns: int = 40,
    retriever: str = "bm25",
    created_by: Any = None,
) -> AblationMatrix:
    """Write a queued matrix and send its one task once committed.

    `conditions` are reference condition names (default: all, in the reference's order);
    `retriever` (bm25, dense or hybrid) is what every condition's search tool ranks with.
    """
    if retriever not in RETRIEVERS:
        raise MatrixParameterError(
            f"unknown retriever {retriever!r}; choose one of: {', '.join(RETRIEVERS)}",
            field="retriever",
        )
    if policy not in POLICY_FACTORIES:
        raise MatrixParameterError(
            f"policy {policy!r} cannot run in-process; choose one of: "
            f"{', '.join(matrix_policies())}",
            field="policy",
        )
    _check_range("runs", runs, 1, MAX_RUNS)
    _check_range("max_turns", max_turns, 1, MAX_TURNS_LIMIT)
    if query_limit is not None:
        _check_range("query_limit", query_limit, 1, 10_000_000)
    names = list(REFERENCE_CONDITIONS) if conditions is None else list(dict.fromkeys(conditions))
    if not names:
        raise MatrixParameterError("choose at least one condition", field="conditions")
    try:
        names = [name for name, _ in reference_conditions(names)]  # aliases by their one name
    except ValueError as exc:
        raise MatrixParameterError(str(exc), field="conditions") from None
    judged = _judged_queries(benchmark).count()
    if not judged:
        raise MatrixParameterError(
            f"benchmark {benchmark.name!r} has no judged queries to run", field="benchmark"
        )
    queries = min(judged, query_limit) if query_limit else judged
    matrix = AblationMatrix.objects.create(
        benchmark=benchmark,
        policy=policy,
        conditions=names,
        runs=runs,
        query_limit=query_limit,
        max_turns=max_turns,
        retriever=retriever,
        episodes_total=len(names) * runs * queries,
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    jobs.enqueue(matrix, queues.ABLATION_MATRIX_RUN)
    return matrix


def ablation_matrix_run(*, matrix_id: int) -> AblationMatrix | None:
    """Run every condition x run x query and store the report; a finished matrix is left as
    it is. Returns the matrix as it stands afterwards, None when it no longer exists."""
    matrix = jobs.claim(AblationMatrix, matrix_id, episodes_done=0)
    if matrix is None:
        return AblationMatrix.objects.filter(pk=matrix_id).first()
    try:
        report = _matrix_play(matrix)
    except Exception as exc:
        log.exception("ablation matrix %s failed", matrix_id)
        jobs.fail(matrix, f"{type(exc).__name__}: {exc}")
    else:
        jobs.finish(matrix, result=report, episodes_done=matrix.episodes_total)
    matrix.refresh_from_db()
    return matrix


def _matrix_play(matrix: AblationMatrix) -> dict[str, Any]:
    from harness_app.indexes import corpus_searcher

    benchmark = Benchmark.objects.select_related("corpus").get(pk=matrix.benchmark_id)
    conditions = reference_conditions(matrix.conditions)
    queries = matrix_queries(benchmark, matrix.query_limit)
    if not queries:
        raise MatrixParameterError("the benchmark has no judged queries left", field=None)
    total = len(conditions) * matrix.runs * len(queries)
    if total != matrix.episodes_total:  # the benchmark changed since the matrix was made
        AblationMatrix.objects.filter(pk=matrix.pk).update(episodes_total=total)
        matrix.episodes_total = total
    started = time.perf_counter()
    retriever = corpus_searcher(benchmark.corpus, matrix.retriever)
    entries = matrix_run(
        retriever,
        queries,
        conditions=conditions,
        policy_name=matrix.policy,
        runs=matrix.runs,
        config=HarnessConfig(max_turns=matrix.max_turns),
        progress=_progress_writer(matrix.pk),
    )
    return matrix_report(
        entries,
        dataset=benchmark.name,
        split=benchmark.split,
        policy=matrix.policy,
        runs=matrix.runs,
        max_turns=matrix.max_turns,
        retriever=matrix.retriever,
        wall_seconds=time.perf_counter() - started,
    )


def _progress_writer(matrix_id: int) -> Progress:
    last = 0.0

    def write(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done == total or now - last >= PROGRESS_EVERY_S:
            last = now
            AblationMatrix.objects.filter(pk=matrix_id, status=MatrixStatus.RUNNING).update(
                episodes_done=done
            )

    return write


def matrix_queries(benchmark: Benchmark, limit: int | None) -> list[QuerySpec]:
    """The first `limit` judged queries of the benchmark (all when None) with their qrels."""
    rows = list(
        _judged_queries(benchmark).values_list("pk", "external_id", "text", "answer")[:limit]
    )
    wanted = {pk for pk, *_ in rows}
    qrels: dict[int, dict[str, int]] = {pk: {} for pk in wanted}
    judged = Qrel.objects.filter(query__benchmark=benchmark).values_list(
        "query_id", "document__external_id", "grade"
    )
    for query_id, document, grade in judged.iterator(chunk_size=5000):
        if query_id in wanted:
            qrels[query_id][document] = grade
    return [QuerySpec(ext, text, answer, qrels[pk]) for pk, ext, text, answer in rows]
