"""The ablation matrix: Harness-1's named conditions x N runs over one query set, in one process.

`matrix_run` is the one implementation behind `python -m harness_app.harness ablate` and the
web app's ablation matrices (trajectories/services/ablations.py): every condition gets its own
`SearchHarness` with its `Ablation`, so conditions never leak into each other, and a
`progress(done, total)` callback hears of every finished episode. Each metric is reported per
condition as the mean over runs of the per-run mean, and its population std across runs.

`matrix_report` is the JSON document both print or store; `matrix_csv` is the reference's CSV
(`CSV_COLUMNS`, the means as values); `format_matrix` is the text table of mean ± std.
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from harness_app.harness.ablation import Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.csv_cells import csv_writer
from harness_app.harness.env import SearchHarness
from harness_app.harness.policies import make_policy
from harness_app.harness.reward import RewardWeights
from harness_app.harness.runner import EpisodeResult, run_episode
from harness_app.harness.types import QuerySpec, Retriever

# The reference's CSV columns after condition and n, each reported as mean and std over runs.
MATRIX_METRICS = (
    "recall",
    "trajectory_recall",
    "final_answer_recall",
    "tool_diversity",
    "turns",
    "errors",
)
CSV_COLUMNS = ("condition", "n", *MATRIX_METRICS)

# Called after every episode with (episodes done, episodes in the whole matrix).
Progress = Callable[[int, int], None]


def episode_failed(result: EpisodeResult) -> bool:
    """The reference's `error`: the episode ended on format failures or the policy gave up.

    Single malformed calls in an episode that went on are not errors there; they show in the
    eval's own `errors` (mean format-error calls) instead.
    """
    return result.termination_reason == "format_errors" or bool(result.error)


def _run_values(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """One run of one condition: the means the reference reports, and its error count."""
    metrics = [r.metrics for r in results]
    return {
        "recall": statistics.fmean(m.curated_recall for m in metrics),
        "trajectory_recall": statistics.fmean(m.trajectory_recall for m in metrics),
        "final_answer_recall": statistics.fmean(m.final_answer_recall for m in metrics),
        "tool_diversity": statistics.fmean(m.tool_diversity for m in metrics),
        "turns": statistics.fmean(m.turns for m in metrics),
        "errors": float(sum(episode_failed(r) for r in results)),
    }


def across_runs(per_run: Sequence[dict[str, float]], name: str) -> tuple[float, float]:
    """The mean over runs of one per-run aggregate and its population std, rounded."""
    values = [run[name] for run in per_run]
    return round(statistics.fmean(values), 4), round(statistics.pstdev(values), 4)


def matrix_entry(condition: str, n: int, per_run: Sequence[dict[str, float]]) -> dict[str, Any]:
    """`<metric>_mean` and `<metric>_std` (population std across runs) for one condition."""
    entry: dict[str, Any] = {"condition": condition, "n": n, "runs": len(per_run)}
    for metric in MATRIX_METRICS:
        entry[f"{metric}_mean"], entry[f"{metric}_std"] = across_runs(per_run, metric)
    return entry


def matrix_run(
    retriever: Retriever,
    queries: Sequence[QuerySpec],
    *,
    conditions: Sequence[tuple[str, Ablation]],
    policy_name: str,
    runs: int,
    config: HarnessConfig,
    progress: Progress | None = None,
    weights: RewardWeights | None = None,
) -> list[dict[str, Any]]:
    """Every condition x `runs` runs x every query; one `matrix_entry` per condition, in order.

    Raises ValueError when there is nothing to run, and PolicyError for an unknown policy.
    """
    if not conditions or not queries or runs < 1:
        raise ValueError(
            f"an ablation matrix needs a condition, a query and a run; got {len(conditions)} "
            f"condition(s), {len(queries)} query(ies), {runs} run(s)"
        )
    total = len(conditions) * runs * len(queries)
    done = 0
    entries = []
    for name, ablation in conditions:
        env = SearchHarness(retriever, config=config, ablation=ablation)
        tools = [schema["function"]["name"] for schema in env.tool_schemas()]
        per_run = []
        for run in range(runs):
            results = []
            for query in queries:
                # The run index seeds a sampling policy: runs differ, and repeat exactly.
                policy = make_policy(policy_name, tools=tools, seed=run)
                results.append(run_episode(env, policy, query, weights=weights))
                done += 1
                if progress is not None:
                    progress(done, total)
            per_run.append(_run_values(results))
        entries.append(matrix_entry(name, len(queries), per_run))
    return entries


def matrix_report(
    entries: Sequence[dict[str, Any]],
    *,
    dataset: str,
    split: str,
    policy: str,
    runs: int,
    max_turns: int,
    wall_seconds: float,
    reward_preset: str = "default",
    retriever: str = "bm25",
) -> dict[str, Any]:
    """The matrix as one JSON object: its settings and the `conditions` list."""
    return {
        "dataset": dataset,
        "split": split,
        "policy": policy,
        "runs": runs,
        "max_turns": max_turns,
        "reward_preset": reward_preset,
        "retriever": retriever,
        "wall_seconds": round(wall_seconds, 2),
        "conditions": list(entries),
    }


def format_matrix(entries: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table of mean ± std, one line per condition."""
    header = ["condition", "n", *MATRIX_METRICS]
    lines = [
        [e["condition"], str(e["n"]), *(format_spread(e, metric) for metric in MATRIX_METRICS)]
        for e in entries
    ]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    )


def format_spread(entry: dict[str, Any], metric: str) -> str:
    """ "0.875 ± 0.010": recalls with 3 decimals, counts with 2."""
    digits = 2 if metric in ("tool_diversity", "turns", "errors") else 3
    return f"{entry[f'{metric}_mean']:.{digits}f} ± {entry[f'{metric}_std']:.{digits}f}"


def matrix_csv(entries: Sequence[dict[str, Any]]) -> str:
    """The reference's CSV: `CSV_COLUMNS`, one row per condition, the means as values."""
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(CSV_COLUMNS)
    for entry in entries:
        values = [_csv_number(metric, entry[f"{metric}_mean"]) for metric in MATRIX_METRICS]
        writer.writerow([entry["condition"], entry["n"], *values])
    return out.getvalue()


def _csv_number(metric: str, value: float) -> str:
    # The reference writes turns with 2 decimals and errors as a count; a count averaged
    # over runs may be fractional.
    if metric == "errors":
        return str(int(value)) if float(value).is_integer() else f"{value:.2f}"
    return f"{value:.2f}" if metric == "turns" else f"{value:.4f}"
