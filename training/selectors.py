"""Reads behind the RL job pages and API: lists, a job with its steps, training curves."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, QuerySet

from training.models import PolicyVersion, RLJob, RLStep
from trajectories.models import RolloutGroup

JOBS_PER_PAGE = 25
# The per-step series the job page draws (static/js/rl_job.js).
SERIES = (
    "reward_mean",
    "curated_recall",
    "trajectory_recall",
    "final_answer_recall",
    "kept_fraction",
    "logprob_gap",
    "logprob_gap_max",
)


def rl_jobs_queryset() -> QuerySet[RLJob]:
    return RLJob.objects.select_related("benchmark", "base_policy", "created_by").order_by("-pk")


def rl_job_list_page(*, page: int | str | None) -> Page[RLJob]:
    return Paginator(rl_jobs_queryset(), JOBS_PER_PAGE).get_page(page)


def rl_job_get(*, pk: int) -> RLJob | None:
    return rl_jobs_queryset().filter(pk=pk).first()


def rl_job_steps(*, job: RLJob) -> list[RLStep]:
    """The job's steps with their versions, batches and rollout groups (for the links)."""
    groups = RolloutGroup.objects.select_related("query").order_by("pk")
    return list(
        job.step_rows.select_related("version__policy", "produced__policy", "batch")
        .prefetch_related(Prefetch("batch__groups", queryset=groups))
        .order_by("index")
    )


def rl_job_versions(*, job: RLJob) -> list[PolicyVersion]:
    return list(job.versions.select_related("policy").order_by("number"))


def rl_job_curves(steps: list[RLStep]) -> dict[str, Any]:
    """Per-step series for the charts: the step index on x, None where a step has no value
    (e.g. no logprob gap for a step whose groups were all dropped)."""
    done = [s for s in steps if s.metrics]
    series = {name: [_number(s.metrics.get(name)) for s in done] for name in SERIES}
    components = sorted({c for s in done for c in s.metrics.get("reward_components", {})})
    skip = {"raw", "total", "empty_set", "format_failure"}
    return {
        "steps": [s.index for s in done],
        "series": series,
        "components": {
            c: [_number(s.metrics.get("reward_components", {}).get(c)) for s in done]
            for c in components
            if c not in skip
        },
    }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
