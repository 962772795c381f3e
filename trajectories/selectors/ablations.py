"""Reads for ablation matrices: one matrix, the recent ones, the latest finished one, and
its table, CSV and chart data (all read from the stored `ablation_matrix.matrix_report()`)."""

from __future__ import annotations

from typing import Any

from harness_app.harness.ablation_matrix import MATRIX_METRICS, format_spread, matrix_csv
from trajectories.models import AblationMatrix, MatrixStatus

METRIC_LABELS = {
    "recall": "Curated recall",
    "trajectory_recall": "Trajectory recall",
    "final_answer_recall": "Final-answer recall",
    "tool_diversity": "Tool diversity",
    "turns": "Turns",
    "errors": "Errors (failed episodes)",
}
# Two charts, so that recalls (0 to 1) and counts each get an axis that fits them.
CHARTS = (
    ("recall", "Recall per condition (mean ± std over runs)", MATRIX_METRICS[:3]),
    ("counts", "Tools, turns and errors per condition (mean ± std over runs)", MATRIX_METRICS[3:]),
)


def ablation_matrix_get(*, pk: int) -> AblationMatrix | None:
    return AblationMatrix.objects.select_related("benchmark", "created_by").filter(pk=pk).first()


def ablation_matrices_recent(*, limit: int = 5) -> list[AblationMatrix]:
    matrices = AblationMatrix.objects.select_related("benchmark", "created_by")
    return list(matrices.order_by("-created_at", "-pk")[:limit])


def ablation_matrix_latest_done() -> AblationMatrix | None:
    matrices = AblationMatrix.objects.select_related("benchmark").filter(status=MatrixStatus.DONE)
    return matrices.order_by("-finished_at", "-pk").first()


def matrix_entries(matrix: AblationMatrix) -> list[dict[str, Any]]:
    """The per-condition entries of a done matrix; empty before then."""
    if matrix.status != MatrixStatus.DONE:
        return []
    return list(matrix.result.get("conditions", []))


def matrix_table(matrix: AblationMatrix) -> dict[str, Any]:
    """Column labels and one row per condition, each cell "mean ± std"."""
    rows = [
        {
            "condition": e["condition"],
            "n": e["n"],
            "cells": [format_spread(e, metric) for metric in MATRIX_METRICS],
        }
        for e in matrix_entries(matrix)
    ]
    return {"columns": [METRIC_LABELS[m] for m in MATRIX_METRICS], "rows": rows}


def matrix_csv_text(matrix: AblationMatrix) -> str:
    """The reference's CSV of a done matrix (the `ablate --csv` file)."""
    return matrix_csv(matrix_entries(matrix))


def matrix_chart(matrix: AblationMatrix) -> dict[str, Any] | None:
    """Grouped bars with error bars (static/js/grouped_bars.js): one group per condition,
    one bar per metric."""
    entries = matrix_entries(matrix)
    if not entries:
        return None
    charts = []
    for chart_id, title, metrics in CHARTS:
        series = [
            {
                "metric": metric,
                "label": METRIC_LABELS[metric],
                "mean": [e[f"{metric}_mean"] for e in entries],
                "std": [e[f"{metric}_std"] for e in entries],
            }
            for metric in metrics
        ]
        charts.append(
            {"id": chart_id, "title": title, "unit_range": chart_id == "recall", "series": series}
        )
    return {
        "matrix": matrix.pk,
        "conditions": [e["condition"] for e in entries],
        "n": entries[0]["n"],
        "runs": entries[0]["runs"],
        "charts": charts,
    }
