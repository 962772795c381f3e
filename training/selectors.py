"""Reads behind the RL and SFT job pages and API: lists, a job with its steps, training
curves, an SFT job's lineage; and the SFT export pages."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, Prefetch, Q, QuerySet

from training.models import (
    DeliveryState,
    PolicyVersion,
    RLJob,
    RLStep,
    RolloutDelivery,
    RolloutRequest,
    RolloutRequestStatus,
    SFTExport,
    SFTJob,
)
from training.rl.overlap import IdleFractions, StepSpan, idle_fractions, overlap_seconds
from trajectories.models import RolloutBatch, RolloutGroup

JOBS_PER_PAGE = 25
# What the trainers import (the `train` extra): `make run` installs the web app alone, so a
# fresh checkout lacks them until `make install-train`.
TRAINER_LIBRARIES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets")
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


def trainer_libraries_missing() -> list[str]:
    """The trainer libraries this process cannot import. In the embedded set-up the worker
    shares this virtualenv, so the launch forms can say before a job fails on the worker."""
    return [name for name in TRAINER_LIBRARIES if importlib.util.find_spec(name) is None]


def rl_jobs_queryset() -> QuerySet[RLJob]:
    return RLJob.objects.select_related(
        "benchmark", "base_policy", "created_by", "warm_start"
    ).order_by("-pk")


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


# --- SFT jobs --------------------------------------------------------------------------------


_SPAN_KEYS = ("rollout_start", "rollout_end", "train_start", "train_end")


def step_span(step: RLStep) -> StepSpan | None:
    """When the step's rollouts and training ran (seconds since the epoch, in its timings);
    None for a step not yet trained, or recorded before the spans were."""
    timings = step.timings or {}
    values = [timings.get(key) for key in _SPAN_KEYS]
    if not all(isinstance(v, int | float) for v in values):
        return None
    return StepSpan(*(float(v) for v in values))  # type: ignore[arg-type]


def job_step_timing(steps: Iterable[RLStep]) -> tuple[dict[int, float], IdleFractions | None]:
    """Per step index, how long its training overlapped the next step's rollouts; and the
    job's rollout-idle and trainer-idle fractions over its trained steps."""
    spans = {step.index: span for step in steps if (span := step_span(step)) is not None}
    overlaps = {
        index: overlap_seconds(span, spans[index + 1])
        for index, span in spans.items()
        if index + 1 in spans
    }
    return overlaps, idle_fractions([spans[i] for i in sorted(spans)])


def sft_jobs_queryset() -> QuerySet[SFTJob]:
    return SFTJob.objects.select_related("export", "base_policy", "policy", "created_by").order_by(
        "-pk"
    )


def sft_job_list_page(*, page: int | str | None) -> Page[SFTJob]:
    return Paginator(sft_jobs_queryset(), JOBS_PER_PAGE).get_page(page)


def sft_job_get(*, pk: int) -> SFTJob | None:
    return sft_jobs_queryset().filter(pk=pk).first()


def sft_job_curves(job: SFTJob) -> dict[str, Any]:
    """Train and eval loss per logged step (static/js/sft_job.js): the step on x, None
    where a step logged no value (the eval loss is logged every eval_steps)."""
    points = [p for p in job.history if isinstance(p, dict) and "step" in p]
    return {
        "steps": [p["step"] for p in points],
        "loss": [_number(p.get("loss")) for p in points],
        "eval_loss": [_number(p.get("eval_loss")) for p in points],
        "learning_rate": [_number(p.get("learning_rate")) for p in points],
    }


def sft_job_teacher_batches(job: SFTJob) -> list[RolloutBatch]:
    """The teacher batches the job's export drew episodes from (the head of the lineage
    teacher batch → export → SFT job → RL job)."""
    return list(
        RolloutBatch.objects.filter(
            episodes__sft_exports__export_id=job.export_id, teacher_rule__isnull=False
        )
        .select_related("policy")
        .distinct()
        .order_by("pk")
    )


def sft_job_rl_jobs(job: SFTJob) -> list[RLJob]:
    """The RL jobs warm-started from the job's adapter."""
    return list(job.rl_jobs.select_related("benchmark").order_by("pk"))


# --- SFT exports -----------------------------------------------------------------------------


def sft_exports_queryset() -> QuerySet[SFTExport]:
    return SFTExport.objects.select_related("created_by").order_by("-pk")


def sft_export_list_page(*, page: int | str | None, episode: int | None = None) -> Page[SFTExport]:
    """The exports, newest first; with `episode`, only those holding that episode (the
    episode page's "In SFT exports" card links here)."""
    exports = sft_exports_queryset()
    if episode is not None:
        exports = exports.filter(items__episode_id=episode).distinct()
    return Paginator(exports, JOBS_PER_PAGE).get_page(page)


def sft_export_get(*, pk: int) -> SFTExport | None:
    return sft_exports_queryset().filter(pk=pk).first()


def export_launch_defaults(export: SFTExport) -> dict[str, int]:
    """The RL launch form's base policy and benchmark for an export: the ones its filters
    name, else the one policy (and benchmark) every exported episode was sampled from.
    Two queries at most; nothing for an export that mixes them."""
    defaults: dict[str, int] = {}
    for key, column in (("base_policy", "policy"), ("benchmark", "benchmark")):
        named = export.filters.get(column)
        if named:
            defaults[key] = int(named)
            continue
        found = list(
            export.items.exclude(**{f"episode__batch__{column}_id": None})
            .order_by()  # the model's ordering would enter the DISTINCT
            .values_list(f"episode__batch__{column}_id", flat=True)
            .distinct()[:2]
        )
        if len(found) == 1:
            defaults[key] = found[0]
    return defaults


def rollout_request_counts(*, request_id: int) -> dict[str, int]:
    """A rollout request's groups by delivery state, every state present (0 when none)."""
    rows = (
        RolloutDelivery.objects.filter(request_id=request_id)
        .values_list("state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    counts = dict.fromkeys(DeliveryState.values, 0)
    counts.update({state: n for state, n in rows})
    return counts


# The states of groups that ended without reaching the trainer, as a reason lists them.
DROPPED_STATES = (
    DeliveryState.ZERO_VARIANCE,
    DeliveryState.FAILED,
    DeliveryState.STALE,
    DeliveryState.STRAGGLER,
)


def rollout_request_reason(*, status: str, groups_wanted: int, counts: Mapping[str, int]) -> str:
    """Why a rollout request finished, in words a trainer can log; empty while open."""
    acked = f"{counts[DeliveryState.ACKED]} of the {groups_wanted} groups wanted"
    if status == RolloutRequestStatus.SATISFIED:
        return f"{acked} were acknowledged"
    if status == RolloutRequestStatus.CANCELLED:
        return f"cancelled with {acked} acknowledged"
    if status == RolloutRequestStatus.EXHAUSTED:
        dropped = ", ".join(f"{counts[s]} {s}" for s in DROPPED_STATES if counts[s]) or "none"
        return f"nothing left to deliver: {acked} were acknowledged; dropped: {dropped}"
    return ""


def rollout_requests_queryset() -> QuerySet[RolloutRequest]:
    """Rollout requests with their groups counted by state (`n_<state>`), in one query."""
    counts = {
        f"n_{state}": Count("deliveries", filter=Q(deliveries__state=state))
        for state in DeliveryState.values
    }
    return RolloutRequest.objects.annotate(**counts).order_by("-pk")
