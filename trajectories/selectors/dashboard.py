"""Reads for the dashboard: recent batches, the means per benchmark × policy × ablation that
its charts and ablation table show, and the latest finished ablation matrix's plot."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, Q

from trajectories.models import Episode, EpisodeKind, EpisodeStatus, RolloutBatch
from trajectories.selectors.ablations import (
    ablation_matrices_recent,
    ablation_matrix_latest_done,
    matrix_chart,
)
from trajectories.selectors.batches import ACTIVE_BATCH, completed_means, rounded


def batches_recent(*, limit: int = 10) -> list[RolloutBatch]:
    batches = RolloutBatch.objects.select_related("benchmark", "policy", "created_by")
    return list(batches.order_by("-created_at", "-pk")[:limit])


def batches_any_active(batches: list[RolloutBatch]) -> bool:
    return any(b.status in ACTIVE_BATCH for b in batches)


def condition_rows() -> list[dict[str, Any]]:
    """Means per benchmark × policy × ablation over completed episodes, plus failures.

    One GROUP BY over the episodes; the dashboard's charts and ablation table both read it.
    """
    rows = (
        # Recorded episodes have no benchmark, policy or ablation to compare by.
        Episode.objects.filter(kind=EpisodeKind.ROLLOUT)
        .values(
            benchmark=F("batch__benchmark__name"),
            policy=F("batch__policy__name"),
            ablation=F("batch__ablation_label"),
        )
        .annotate(**completed_means(), errors=Count("pk", filter=Q(status=EpisodeStatus.FAILED)))
        .order_by("benchmark", "policy", "ablation")
    )
    return [rounded(row) for row in rows]


def dashboard_data() -> dict[str, Any]:
    """The dashboard's rollout sections: recent batches, per-condition means, charts, and
    the ablation matrices (the latest finished one drawn)."""
    batches = batches_recent()
    rows = condition_rows()
    latest = ablation_matrix_latest_done()
    return {
        "batches": batches,
        "any_active": batches_any_active(batches),
        "conditions": rows,
        "charts": dashboard_charts(rows),
        "matrices": ablation_matrices_recent(),
        "latest_matrix": latest,
        "chart": None if latest is None else matrix_chart(latest),
    }


def dashboard_charts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The three recall charts' data: one series per ablation over benchmark · policy."""
    conditions = sorted({f"{r['benchmark']} · {r['policy']}" for r in rows})
    ablations = sorted({r["ablation"] for r in rows})
    metrics = ("curated_recall", "final_answer_recall", "trajectory_recall")
    charts: dict[str, Any] = {"conditions": conditions, "metrics": {}}
    for metric in metrics:
        series = []
        for ablation in ablations:
            by_condition = {
                f"{r['benchmark']} · {r['policy']}": r
                for r in rows
                if r["ablation"] == ablation and r["n"]
            }
            series.append(
                {
                    "name": ablation,
                    "y": [_mean_or_none(by_condition.get(c), metric) for c in conditions],
                    "n": [by_condition[c]["n"] if c in by_condition else 0 for c in conditions],
                }
            )
        charts["metrics"][metric] = series
    return charts


def _mean_or_none(row: dict[str, Any] | None, metric: str) -> float | None:
    return None if row is None else row[f"mean_{metric}"]
