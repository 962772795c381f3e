"""Reads for evaluation runs: progress, the mean ± std table per cell, the paired comparison
of two configurations, and the transfer table (benchmark x configuration) with its CSV and
chart data. Everything is computed from the completed episodes of the run's batches.

A configuration is a policy config under one ablation condition; a cell is a benchmark x
configuration. Each metric of a cell is the mean over runs of the per-run mean over its
completed episodes, with the population std across runs (as `ablate` reports, through
`harness.stats.spread`). Failed episodes count in `failed`, never in the means.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from harness_app.harness.ablation import condition_name
from harness_app.harness.ablation_matrix import format_spread
from harness_app.harness.csv_cells import csv_writer
from harness_app.harness.stats import Spread, paired_bootstrap, spread
from trajectories.models import (
    BatchStatus,
    Episode,
    EpisodeStatus,
    EvaluationRun,
    RolloutBatch,
)
from trajectories.selectors.ablations import METRIC_LABELS as ABLATION_LABELS

# Columns of the episode row, then the keys of Episode.metrics, that the tables report.
COLUMN_METRICS = ("curated_recall", "trajectory_recall", "final_answer_recall", "reward", "turns")
ANSWER_METRICS = ("answer_em", "answer_f1")  # present when the harness scored the answer
METRICS = (*COLUMN_METRICS, *ANSWER_METRICS)
METRIC_LABELS = {
    **{m: ABLATION_LABELS[m] for m in ("trajectory_recall", "final_answer_recall", "turns")},
    "curated_recall": ABLATION_LABELS["recall"],
    "reward": "Reward",
    "answer_em": "Answer exact match",
    "answer_f1": "Answer F1",
}
FINISHED_BATCH = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED)


class EvaluationQueryError(ValueError):
    """A table or comparison asked for something the run does not have; `field` names the
    parameter (`metric`, `a`, `b`, `benchmark`)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Config:
    """A policy config under one condition: a column of the tables."""

    key: str  # "<policy pk>:<condition>", stable for links and the API
    policy: str
    condition: str

    @property
    def label(self) -> str:
        return f"{self.policy} · {self.condition}"


def evaluation_get(*, pk: int) -> EvaluationRun | None:
    return EvaluationRun.objects.select_related("created_by").filter(pk=pk).first()


def evaluations_for_list() -> QuerySet[EvaluationRun]:
    """Runs newest first, each with its batch and episode counts for a progress column."""
    return (
        EvaluationRun.objects.select_related("created_by")
        .annotate(
            batches_total=Count("batches"),
            batches_finished=Count("batches", filter=Q(batches__status__in=FINISHED_BATCH)),
            episodes_total=Sum("batches__episodes_total"),
            episodes_completed=Sum("batches__episodes_completed"),
            episodes_failed=Sum("batches__episodes_failed"),
        )
        .order_by("-created_at", "-pk")
    )


def evaluation_progress(*, evaluation: EvaluationRun) -> dict[str, Any]:
    """Finished batches and episodes of the run, and the fraction of episodes finished."""
    counts = evaluation.batches.aggregate(
        batches_total=Count("pk"),
        batches_finished=Count("pk", filter=Q(status__in=FINISHED_BATCH)),
        episodes_total=Sum("episodes_total"),
        episodes_completed=Sum("episodes_completed"),
        episodes_failed=Sum("episodes_failed"),
    )
    counts = {k: v or 0 for k, v in counts.items()}
    finished = counts["episodes_completed"] + counts["episodes_failed"]
    total = counts["episodes_total"]
    return {
        "status": evaluation.status,
        **counts,
        "episodes_finished": finished,
        "progress": round(finished / total, 4) if total else 0.0,
    }


def evaluation_configs(*, evaluation: EvaluationRun) -> list[Config]:
    """The run's configurations: policies by name, conditions in the run's order."""
    policies = evaluation.policies.order_by("name").values_list("pk", "name")
    return [
        Config(f"{pk}:{condition}", name, condition)
        for pk, name in policies
        for condition in evaluation.conditions
    ]


def _benchmarks(evaluation: EvaluationRun) -> list[tuple[int, str]]:
    return list(evaluation.benchmarks.order_by("name").values_list("pk", "name"))


# (benchmark pk, config key) -> run index -> query pk -> metric -> value
Cells = dict[tuple[int, str], dict[int, dict[int, dict[str, float]]]]


def _episode_values(evaluation: EvaluationRun) -> Cells:
    rows = Episode.objects.filter(
        batch__evaluation=evaluation, status=EpisodeStatus.COMPLETED
    ).values_list(
        "batch__benchmark_id",
        "batch__policy_id",
        "batch__evaluation_condition",
        "batch__evaluation_run_index",
        "query_id",
        *COLUMN_METRICS,
        "metrics",
    )
    cells: Cells = defaultdict(lambda: defaultdict(dict))
    for benchmark, policy, condition, run, query, *columns, metrics in rows.iterator(2000):
        values = {
            m: float(v) for m, v in zip(COLUMN_METRICS, columns, strict=True) if v is not None
        }
        for metric in ANSWER_METRICS:
            value = (metrics or {}).get(metric)
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[metric] = float(value)
        cells[(benchmark, f"{policy}:{condition}")][run][query] = values
    return cells


def _cell_spread(runs: dict[int, dict[int, dict[str, float]]], metric: str) -> Spread | None:
    per_run = []
    for queries in runs.values():
        values = [v[metric] for v in queries.values() if metric in v]
        if values:
            per_run.append(sum(values) / len(values))
    return spread(per_run)


def _reported_metrics(cells: Cells) -> list[str]:
    """Every column metric, and the answer metrics once any episode has them."""
    seen = {m for runs in cells.values() for q in runs.values() for v in q.values() for m in v}
    return [m for m in METRICS if m in COLUMN_METRICS or m in seen]


def _failed_by_cell(evaluation: EvaluationRun) -> dict[tuple[int, str], int]:
    rows = RolloutBatch.objects.filter(evaluation=evaluation).values_list(
        "benchmark_id", "policy_id", "evaluation_condition", "episodes_failed"
    )
    failed: dict[tuple[int, str], int] = defaultdict(int)
    for benchmark, policy, condition, count in rows:
        failed[(benchmark, f"{policy}:{condition}")] += count
    return failed


def evaluation_table(*, evaluation: EvaluationRun) -> dict[str, Any]:
    """One row per benchmark x configuration: runs with results, queries per run, failed
    episodes, and each metric as "mean ± std" (and as numbers under `values`)."""
    cells = _episode_values(evaluation)
    metrics = _reported_metrics(cells)
    failed = _failed_by_cell(evaluation)
    rows = []
    for benchmark_pk, benchmark in _benchmarks(evaluation):
        for config in evaluation_configs(evaluation=evaluation):
            runs = cells.get((benchmark_pk, config.key), {})
            values = {m: _spread_json(_cell_spread(runs, m)) for m in metrics}
            entry = {f"{m}_{k}": v[k] for m, v in values.items() if v for k in ("mean", "std")}
            rows.append(
                {
                    "benchmark": benchmark,
                    "config": config.label,
                    "config_key": config.key,
                    "runs": len(runs),
                    "n": max((len(q) for q in runs.values()), default=0),
                    "failed": failed.get((benchmark_pk, config.key), 0),
                    "cells": [format_spread(entry, m) if values[m] else "—" for m in metrics],
                    "values": values,
                }
            )
    return {"metrics": metrics, "columns": [METRIC_LABELS[m] for m in metrics], "rows": rows}


def _spread_json(value: Spread | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {"mean": round(value.mean, 4), "std": round(value.std, 4), "runs": value.runs}


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise EvaluationQueryError(
            f"metric {metric!r} is not one of {', '.join(METRICS)}", field="metric"
        )


def _config(configs: Iterable[Config], key: str, field: str) -> Config:
    policy, _, condition = key.partition(":")
    key = f"{policy}:{condition_name(condition)}"  # a link from before the one names
    for config in configs:
        if config.key == key:
            return config
    raise EvaluationQueryError(
        f"{field}={key!r} is not a configuration of this run; choose one of "
        f"{', '.join(c.key for c in configs)}",
        field=field,
    )


def _per_query(
    cells: Cells, key: str, metric: str, benchmarks: Iterable[int]
) -> dict[tuple[int, int], float]:
    """Each query's mean over the runs that scored it, keyed by (benchmark, query)."""
    sums: dict[tuple[int, int], list[float]] = defaultdict(list)
    for benchmark in benchmarks:
        for queries in cells.get((benchmark, key), {}).values():
            for query, values in queries.items():
                if metric in values:
                    sums[(benchmark, query)].append(values[metric])
    return {k: sum(v) / len(v) for k, v in sums.items()}


def evaluation_compare(
    *,
    evaluation: EvaluationRun,
    a: str,
    b: str,
    metric: str = "curated_recall",
    benchmark: int | None = None,
) -> dict[str, Any]:
    """B minus A on the queries both ran (all benchmarks, or one): per-query means over runs,
    the mean difference and its 95% percentile bootstrap CI (2000 resamples, fixed seed)."""
    _check_metric(metric)
    configs = evaluation_configs(evaluation=evaluation)
    config_a, config_b = _config(configs, a, "a"), _config(configs, b, "b")
    benchmarks = dict(_benchmarks(evaluation))
    if benchmark is not None and benchmark not in benchmarks:
        raise EvaluationQueryError(
            f"benchmark {benchmark} is not a benchmark of this run", field="benchmark"
        )
    chosen = [benchmark] if benchmark is not None else list(benchmarks)
    cells = _episode_values(evaluation)
    comparison = paired_bootstrap(
        _per_query(cells, config_a.key, metric, chosen),
        _per_query(cells, config_b.key, metric, chosen),
    )
    return {
        "metric": metric,
        "metric_label": METRIC_LABELS[metric],
        "a": {"key": config_a.key, "label": config_a.label},
        "b": {"key": config_b.key, "label": config_b.label},
        "benchmark": benchmarks[benchmark] if benchmark is not None else None,
        "comparison": _rounded(asdict(comparison)) if comparison else None,
    }


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def evaluation_transfer(
    *, evaluation: EvaluationRun, metric: str = "curated_recall"
) -> dict[str, Any]:
    """Benchmark rows x configuration columns of one metric, each cell mean and std over runs
    (None where the cell has no completed episode)."""
    _check_metric(metric)
    cells = _episode_values(evaluation)
    configs = evaluation_configs(evaluation=evaluation)
    rows = [
        {
            "benchmark": name,
            "cells": [
                _spread_json(_cell_spread(cells.get((pk, c.key), {}), metric)) for c in configs
            ],
        }
        for pk, name in _benchmarks(evaluation)
    ]
    return {
        "metric": metric,
        "metric_label": METRIC_LABELS[metric],
        "configs": [{"key": c.key, "label": c.label} for c in configs],
        "rows": rows,
    }


def transfer_csv(transfer: dict[str, Any]) -> str:
    """benchmark, then `<configuration> mean` and `<configuration> std` per configuration."""
    out = io.StringIO()
    writer = csv_writer(out)
    header = ["benchmark"]
    for config in transfer["configs"]:
        header += [f"{config['label']} mean", f"{config['label']} std"]
    writer.writerow(header)
    for row in transfer["rows"]:
        values: list[Any] = [row["benchmark"]]
        for cell in row["cells"]:
            values += [f"{cell['mean']:.4f}", f"{cell['std']:.4f}"] if cell else ["", ""]
        writer.writerow(values)
    return out.getvalue()


def transfer_chart(transfer: dict[str, Any]) -> dict[str, Any]:
    """Grouped bars (static/js/grouped_bars.js): one group per benchmark, one bar per
    configuration, the std across runs as error bars."""
    series = [
        {
            "label": config["label"],
            "mean": [
                row["cells"][i]["mean"] if row["cells"][i] else None for row in transfer["rows"]
            ],
            "std": [
                row["cells"][i]["std"] if row["cells"][i] else None for row in transfer["rows"]
            ],
        }
        for i, config in enumerate(transfer["configs"])
    ]
    bounded = transfer["metric"] != "turns" and transfer["metric"] != "reward"
    return {
        "groups": [row["benchmark"] for row in transfer["rows"]],
        "charts": [
            {
                "id": "transfer",
                "title": f"{transfer['metric_label']} per benchmark (mean ± std over runs)",
                "unit_range": bounded,
                "series": series,
            }
        ],
    }
