"""What an RL step measured: its rollouts' rewards and recalls, what the batch build kept,
for the step table and the training curves.
"""

from __future__ import annotations

import statistics
from typing import Any

from training.rl.batches import BatchBuild
from trajectories.models import Episode, EpisodeStatus


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def rollout_metrics(*, batch_id: int) -> dict[str, Any]:
    """Reward, its components and the recall metrics over the batch's scored episodes."""
    rows: list[dict[str, Any]] = [
        dict(row)
        for row in Episode.objects.filter(batch_id=batch_id).values(
            "status",
            "reward",
            "reward_components",
            "curated_recall",
            "trajectory_recall",
            "final_answer_recall",
            "tool_diversity",
            "turns",
        )
    ]
    scored = [r for r in rows if r["status"] == EpisodeStatus.COMPLETED and r["reward"] is not None]
    rewards = [float(r["reward"]) for r in scored]
    out: dict[str, Any] = {
        "episodes": len(rows),
        "episodes_scored": len(scored),
        "episodes_failed": sum(r["status"] == EpisodeStatus.FAILED for r in rows),
        "reward_mean": _mean(rewards),
        "reward_std": statistics.pstdev(rewards) if rewards else None,
    }
    for metric in ("curated_recall", "trajectory_recall", "final_answer_recall"):
        out[metric] = _mean([r[metric] for r in scored if r[metric] is not None])
    out["tool_diversity"] = _mean([r["tool_diversity"] for r in scored if r["tool_diversity"]])
    out["turns"] = _mean([r["turns"] for r in scored])
    out["reward_components"] = _component_means(r["reward_components"] for r in scored)
    return out


def _component_means(components: Any) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for row in components:
        for name, value in (row or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                sums.setdefault(name, []).append(float(value))
    return {name: statistics.fmean(values) for name, values in sums.items()}


def build_metrics(build: BatchBuild) -> dict[str, Any]:
    groups = len(build.kept_groups) + len(build.dropped_groups)
    return {
        "kept_groups": len(build.kept_groups),
        "dropped_groups": len(build.dropped_groups),
        "kept_fraction": len(build.kept_groups) / groups if groups else 0.0,
        "sequences": len(build.sequences),
        "episodes_trained": build.episodes,
        "exclusions": build.exclusion_counts(),
        "chain_breaks": len(build.breaks),
    }
