"""Reads for the dashboard: recent batches, the means per experiment (benchmark × policy ×
ablation × conversation settings) that its charts and ablation table show, and the latest
finished ablation matrix's plot."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, Q, StdDev

from harness_app.harness.reward import RewardWeights
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


# What a batch runs under beyond its benchmark, policy and ablation: batches that differ in
# any of these are different experiments, so the dashboard never pools their episodes.
# (Samples per query, a teacher rule and token capture change which episodes are kept or
# how calls are recorded, not what one episode does.)
SETTING_FIELDS = ("termination_policy", "max_turns", "query_limit", "reward_weights")
CHART_METRICS = ("curated_recall", "final_answer_recall", "trajectory_recall")


def condition_rows() -> list[dict[str, Any]]:
    """Means and standard deviations per experiment over completed episodes, with failed
    and cancelled counts. An experiment is benchmark × policy × ablation × the batch's
    conversation settings (SETTING_FIELDS), so a 40-turn max_turns batch and a 3-turn
    last_tool batch are two rows.

    One GROUP BY over the episodes; the dashboard's charts and ablation table both read it.
    """
    done = Q(status=EpisodeStatus.COMPLETED)
    rows = (
        # Recorded episodes have no benchmark, policy or ablation to compare by.
        Episode.objects.filter(kind=EpisodeKind.ROLLOUT)
        .values(
            benchmark=F("batch__benchmark__name"),
            policy=F("batch__policy__name"),
            ablation=F("batch__ablation_label"),
            **{name: F(f"batch__{name}") for name in SETTING_FIELDS},
        )
        .annotate(
            **completed_means(),
            **{f"std_{m}": StdDev(m, filter=done) for m in CHART_METRICS},
            errors=Count("pk", filter=Q(status=EpisodeStatus.FAILED)),
            cancelled=Count("pk", filter=Q(status=EpisodeStatus.CANCELLED)),
        )
        .order_by("benchmark", "policy", "ablation", *SETTING_FIELDS)
    )
    return [{**rounded(row), "settings": settings_label(row)} for row in rows]


def settings_label(row: dict[str, Any]) -> str:
    """The conversation settings in a few words: "max_turns ≤ 40 turns", then the query
    limit and any reward weight that differs from the default."""
    parts = [f"{row['termination_policy']} ≤ {row['max_turns']} turns"]
    if row["query_limit"]:
        parts.append(f"first {row['query_limit']} queries")
    default = RewardWeights().to_json()
    changed = {k: v for k, v in (row["reward_weights"] or {}).items() if default.get(k) != v}
    if changed:
        parts.append("reward " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
    return " · ".join(parts)


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
        # The reader's columns appear once any experiment has answer scores.
        "answer_columns": any(r["mean_answer_em"] is not None for r in rows),
        "charts": dashboard_charts(rows),
        "matrices": ablation_matrices_recent(),
        "latest_matrix": latest,
        "chart": None if latest is None else matrix_chart(latest),
    }


def dashboard_charts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The three recall charts' data: one series per ablation over benchmark · policy ·
    settings, each bar a mean with its standard deviation (the error bar) and n. Beside
    each condition's label, its three parts, from which the charts make short ticks."""
    parts = {_condition(r): [r["benchmark"], r["policy"], r["settings"]] for r in rows}
    conditions = sorted(parts)
    ablations = sorted({r["ablation"] for r in rows})
    charts: dict[str, Any] = {
        "conditions": conditions,
        "condition_parts": [parts[c] for c in conditions],
        "metrics": {},
    }
    for metric in CHART_METRICS:
        series = []
        for ablation in ablations:
            by_condition = {_condition(r): r for r in rows if r["ablation"] == ablation and r["n"]}
            found = [by_condition.get(c) for c in conditions]
            series.append(
                {
                    "name": ablation,
                    "y": [None if r is None else r[f"mean_{metric}"] for r in found],
                    "std": [None if r is None else r[f"std_{metric}"] for r in found],
                    "n": [0 if r is None else r["n"] for r in found],
                }
            )
        charts["metrics"][metric] = series
    return charts


def _condition(row: dict[str, Any]) -> str:
    return f"{row['benchmark']} · {row['policy']} · {row['settings']}"
