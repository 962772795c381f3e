"""Reads of harness tasks, groups and runs for the pages and the API.

A group's advantages here are the ones RL trains with (training.rl.samples,
`rl_samples_for_recordings`): a run is a candidate only when its session is trainable and
its episode completed with a reward; the others are left out *before* the mean is taken,
and a group whose candidates all scored the same is dropped (no signal). This module
cannot import the training app (it sits on the floor below), so it repeats that rule; a
test holds the two to the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count, Q, QuerySet

from trajectories.models import (
    EpisodeStatus,
    HarnessGroup,
    HarnessRun,
    HarnessTask,
    ModelCall,
)
from trajectories.models.harness_tasks import FINISHED_RUN
from trajectories.selectors import recording

# Rewards closer than this count as equal (training.rl.advantages.ZERO_VARIANCE_TOL).
ZERO_VARIANCE_TOL = 1e-9


def harness_tasks() -> QuerySet[HarnessTask]:
    """Tasks for the list: newest first, with their group counts (one query)."""
    tasks = HarnessTask.objects.select_related("created_by")
    return tasks.annotate(group_count=Count("groups")).order_by("-pk")


def harness_groups() -> QuerySet[HarnessGroup]:
    """Groups for lists: their task, and counts of finished runs and the mean reward."""
    return (
        HarnessGroup.objects.select_related("task", "created_by")
        .annotate(
            runs_finished=Count("runs", filter=Q(runs__status__in=FINISHED_RUN)),
            reward_mean=Avg("runs__reward"),
        )
        .order_by("-pk")
    )


def harness_runs_of(*, group: HarnessGroup | int) -> QuerySet[HarnessRun]:
    return (
        HarnessRun.objects.filter(group=group).select_related("session__episode").order_by("index")
    )


@dataclass(frozen=True)
class RunRow:
    run: HarnessRun
    advantage: float | None
    excluded: str  # why the run is not trained on; "" when it is a candidate


@dataclass(frozen=True)
class GroupAdvantages:
    rows: list[RunRow]
    mean_reward: float | None  # over the candidates
    dropped: bool  # every candidate scored the same: the group carries no signal


def run_exclusion(run: HarnessRun) -> str:
    """Why RL leaves the run out, the way rl_episodes_for_recordings says it; or ""."""
    session, episode = run.session, run.session.episode
    if session.untrainable_reason:
        return session.untrainable_reason
    if episode.status != EpisodeStatus.COMPLETED:
        return f"not_completed: status {episode.status}"
    if episode.reward is None:
        return "no_reward: the episode has no reward"
    return ""


def group_advantages(*, runs: list[HarnessRun]) -> GroupAdvantages:
    """Reward minus the candidates' mean, for each candidate run (no std normalisation)."""
    excluded = {run.pk: run_exclusion(run) for run in runs}
    rewards = [
        float(run.session.episode.reward)
        for run in runs
        if not excluded[run.pk] and run.session.episode.reward is not None
    ]
    mean = sum(rewards) / len(rewards) if rewards else None
    dropped = bool(rewards) and max(rewards) - min(rewards) <= ZERO_VARIANCE_TOL
    rows = []
    for run in runs:
        reward = run.session.episode.reward
        advantage = None
        if mean is not None and reward is not None and not dropped and not excluded[run.pk]:
            advantage = float(reward) - mean
        why = excluded[run.pk] or ("zero_variance_group" if dropped else "")
        rows.append(RunRow(run, advantage, why))
    return GroupAdvantages(rows=rows, mean_reward=mean, dropped=dropped)


def harness_group_view(*, group: HarnessGroup) -> GroupAdvantages:
    """The group's runs with rewards and advantages (one query)."""
    return group_advantages(runs=list(harness_runs_of(group=group)))


# --- one run ---------------------------------------------------------------------------------

CALL_FIELDS = (
    "pk",
    "episode_id",
    "turn_index",
    "api",
    "agent",
    "latency_ms",
    "usage",
    "finish_reason",
    "error",
    "aborted",
    "policy_version",
    "created_at",
)


@dataclass(frozen=True)
class RunView:
    run: HarnessRun
    calls: list[ModelCall]  # in order, without the request, response or token blobs
    recording: recording.RecordingView  # the chains, their breaks, the failed calls
    totals: dict[str, Any]


def harness_run_get(*, pk: int) -> HarnessRun | None:
    return (
        HarnessRun.objects.select_related("group__task", "session__episode", "session__created_by")
        .filter(pk=pk)
        .first()
    )


def harness_run_view(*, run: HarnessRun, now: Any) -> RunView:
    """The run page: the calls in order, the recorded chains and the totals."""
    episode = run.session.episode
    calls = list(
        ModelCall.objects.filter(episode=episode).only(*CALL_FIELDS).order_by("turn_index", "pk")
    )
    totals = {
        "calls": len(calls),
        "prompt_tokens": sum(int(c.usage.get("prompt_tokens") or 0) for c in calls),
        "completion_tokens": sum(int(c.usage.get("completion_tokens") or 0) for c in calls),
        "latency_ms": sum(c.latency_ms for c in calls),
        "failed": sum(bool(c.error) for c in calls),
    }
    return RunView(
        run=run,
        calls=calls,
        recording=recording.recording_view(episode=episode, now=now),
        totals=totals,
    )
