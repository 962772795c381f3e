"""The episodes of `eval`: each condition's runs over the queries, one row per query and
run (metrics, reward, plain BM25 at the same number of documents, the reader's answer),
their means per run, the spread across runs, and the text table.

The command line (cli.py) reads the arguments and prints; this module does the work.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from harness_app.harness.ablation import Ablation
from harness_app.harness.ablation_matrix import across_runs
from harness_app.harness.answer_eval import AnswerStep, answer_means
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.metrics import single_search_recall
from harness_app.harness.policies import make_policy
from harness_app.harness.reward import RewardWeights
from harness_app.harness.runner import run_episode
from harness_app.harness.types import QuerySpec, Retriever

TABLE_COLUMNS = (
    "condition",
    "n",
    "recall",
    "trajectory_recall",
    "final_answer_recall",
    "tool_diversity",
    "turns",
    "errors",
    "reward",
)
# Per-query values averaged into the aggregate (metric name -> aggregate name).
AVERAGED = {
    "curated_recall": "recall",
    "precision": "precision",
    "f_beta": "f2",
    "final_answer_recall": "final_answer_recall",
    "trajectory_recall": "trajectory_recall",
    "trajectory_final_answer_recall": "trajectory_final_answer_recall",
    "tool_diversity": "tool_diversity",
    "turns": "turns",
    "format_errors": "errors",
    "curated_count": "curated_size",
    "reward": "reward",
    "bm25_recall_same_k": "bm25_recall_same_k",
    "bm25_final_answer_recall_same_k": "bm25_final_answer_recall_same_k",
    "shown_count": "shown",
    "bm25_recall_same_shown": "bm25_recall_same_shown",
    "bm25_final_answer_recall_same_shown": "bm25_final_answer_recall_same_shown",
    "seconds": "seconds_per_query",
}


def evaluate_condition(
    retriever: Retriever,
    queries: Sequence[QuerySpec],
    *,
    policy_name: str,
    ablation: Ablation,
    config: HarnessConfig,
    run: int = 0,
    weights: RewardWeights | None = None,
    answer_step: AnswerStep | None = None,
) -> Iterator[dict[str, Any]]:
    """One row per query: metrics, reward and plain BM25 at the episode's curated size;
    with an answer step, the reader's answer and its EM and F1."""
    env = SearchHarness(retriever, config=config, ablation=ablation)
    tools = [schema["function"]["name"] for schema in env.tool_schemas()]
    for query in queries:
        policy = make_policy(policy_name, tools=tools, seed=run)
        result = run_episode(env, policy, query, weights=weights)
        # Compare like with like: the curated set against BM25 cut at its size, and the
        # whole trajectory against BM25 cut at the number of documents the episode showed.
        bm25 = single_search_recall(retriever, query, result.metrics.curated_count)
        bm25_shown = single_search_recall(retriever, query, result.metrics.shown_count)
        answer = (
            {} if answer_step is None else answer_step.fields(query, env.state.curated, retriever)
        )
        yield {
            "condition": ablation.label,
            "run": run,
            "query_id": query.query_id,
            "policy": result.policy,
            "termination_reason": result.termination_reason,
            "error": result.error,
            **result.metrics.to_json(),
            "reward": result.reward.total,
            "reward_components": result.reward.to_json(),
            "bm25_recall_same_k": bm25.curated,
            "bm25_final_answer_recall_same_k": bm25.final_answer,
            "bm25_recall_same_shown": bm25_shown.curated,
            "bm25_final_answer_recall_same_shown": bm25_shown.final_answer,
            "curated_ids": result.curated_ids,
            "seconds": round(result.seconds, 4),
            **answer,
        }


def run_condition(
    retriever: Retriever,
    queries: Sequence[QuerySpec],
    *,
    policy_name: str,
    ablation: Ablation,
    config: HarnessConfig,
    runs: int,
    out: TextIO | None = None,
    weights: RewardWeights | None = None,
    answer_step: AnswerStep | None = None,
) -> list[list[dict[str, Any]]]:
    """Every run of one condition, as its per-query rows; each row is written to `out` as
    soon as it is scored."""
    per_run = []
    for run in range(runs):
        rows = []
        for row in evaluate_condition(
            retriever,
            queries,
            policy_name=policy_name,
            ablation=ablation,
            config=config,
            run=run,
            weights=weights,
            answer_step=answer_step,
        ):
            rows.append(row)
            if out is not None:  # row by row, so a long reader run shows its progress
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                out.flush()
        per_run.append(rows)
    return per_run


def aggregate_rows(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean of each averaged value over the rows of one run, and the reader's scores."""
    means = {
        name: statistics.fmean(float(row[key]) for row in rows) for key, name in AVERAGED.items()
    }
    return {**means, **answer_means(rows)}


def combine_runs(
    condition: str, policy: str, n: int, per_run: Sequence[dict[str, float]]
) -> dict[str, Any]:
    """Mean over runs of each aggregate, plus its spread across runs as `<name>_std`."""
    summary: dict[str, Any] = {"condition": condition, "policy": policy, "n": n}
    summary["runs"] = len(per_run)
    names = [*AVERAGED.values(), *(k for k in per_run[0] if k not in AVERAGED.values())]
    for name in names:
        if all(name in run for run in per_run):
            summary[name], summary[f"{name}_std"] = across_runs(per_run, name)
    return summary


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A fixed-width text table, one line per condition."""
    return _text_table(
        [*TABLE_COLUMNS], [[_cell(s, column) for column in TABLE_COLUMNS] for s in summaries]
    )


def _text_table(header: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    )


def _cell(summary: dict[str, Any], column: str) -> str:
    value = summary[column]
    if isinstance(value, float):
        return f"{value:.2f}" if column in ("turns", "errors", "tool_diversity") else f"{value:.3f}"
    return str(value)
