"""Reads for batches and their groups: one batch's progress and means, its groups page,
and a group's samples side by side."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Avg, Count, F, FloatField, Min, Q, QuerySet, StdDev
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from harness_app.models import Qrel
from trajectories.models import (
    BatchStatus,
    CuratedItem,
    Episode,
    EpisodeStatus,
    RolloutBatch,
    RolloutGroup,
)
from trajectories.teacher_rule import RULE_KEYS, clause_label

GROUPS_PER_PAGE = 50
ACTIVE_BATCH = (BatchStatus.QUEUED, BatchStatus.RUNNING)  # the page refreshes itself
AGGREGATE_FIELDS = (
    "curated_recall",
    "trajectory_recall",
    "final_answer_recall",
    "tool_diversity",
    "turns",
    "format_errors",
    "reward",
)


# The means the batch page and the dashboard show, over completed episodes only.
MEAN_FIELDS = (
    "curated_recall",
    "trajectory_recall",
    "final_answer_recall",
    "tool_diversity",
    "turns",
    "reward",
)


# Answer accuracy from the reader (docs/harness-results.md), kept in Episode.metrics only
# when READER_BASE_URL is set: their means are None, and the pages hide them, otherwise.
ANSWER_FIELDS = ("answer_em", "answer_f1")


def metrics_value(name: str) -> Cast:
    """One number from Episode.metrics as a float expression (NULL where it is absent)."""
    return Cast(KeyTextTransform(name, "metrics"), FloatField())


def completed_means() -> dict[str, Any]:
    """`n` and `mean_<field>` aggregates over completed episodes, for `aggregate` or
    `annotate`, with the reader's `mean_answer_em` and `mean_answer_f1` over the episodes
    that have them. The aliases must not shadow Episode's columns, or Avg would read the
    aggregate instead of the column."""
    done = Q(status=EpisodeStatus.COMPLETED)
    means: dict[str, Any] = {f"mean_{f}": Avg(f, filter=done) for f in MEAN_FIELDS}
    answers = {f"mean_{f}": Avg(metrics_value(f), filter=done) for f in ANSWER_FIELDS}
    return {"n": Count("pk", filter=done), **means, **answers}


def batch_get(*, pk: int) -> RolloutBatch | None:
    return (
        RolloutBatch.objects.select_related("benchmark", "policy", "created_by")
        .filter(pk=pk)
        .first()
    )


def batch_summary(*, batch: RolloutBatch) -> dict[str, Any]:
    """Progress and the mean of each metric over the batch's completed episodes."""
    batch.refresh_from_db()
    completed = Episode.objects.filter(batch=batch, status=EpisodeStatus.COMPLETED)
    # Aliases must not shadow the model's field names, or StdDev("reward") would see the
    # Avg aggregate instead of the column.
    raw = completed.aggregate(
        n=Count("pk"),
        **{f"mean_{name}": Avg(name) for name in AGGREGATE_FIELDS},
        **{f"mean_{name}": Avg(metrics_value(name)) for name in ANSWER_FIELDS},
        std_reward=StdDev("reward"),
    )
    means = {key.removeprefix("mean_"): value for key, value in raw.items()}
    means["reward_std"] = means.pop("std_reward")
    for name in ANSWER_FIELDS:  # only when a reader scored the batch's episodes
        if means[name] is None:
            del means[name]
    reasons = dict(
        Episode.objects.filter(batch=batch)
        .exclude(termination_reason="")
        .values_list("termination_reason")
        .annotate(n=Count("pk"))
        .values_list("termination_reason", "n")
    )
    failed = Episode.objects.filter(batch=batch).filter(
        Q(status=EpisodeStatus.FAILED) | Q(status=EpisodeStatus.CANCELLED)
    )
    return {
        "batch": batch.pk,
        "status": batch.status,
        "benchmark": batch.benchmark.name,
        "policy": batch.policy.name,
        "ablation": batch.ablation_label,
        "episodes_total": batch.episodes_total,
        "episodes_completed": batch.episodes_completed,
        "episodes_failed": batch.episodes_failed,
        "termination_reasons": reasons,
        "errors": list(failed.exclude(error="").values_list("error", flat=True)[:5]),
        "metrics": rounded(means),
        "teacher": teacher_summary(batch=batch),
    }


def batch_metrics(*, batch: RolloutBatch) -> dict[str, Any]:
    """Means over the batch's completed episodes, its pace and its termination reasons: two
    queries, so the batch page's live refresh stays as cheap as its first load."""
    done = Q(status=EpisodeStatus.COMPLETED)
    means = Episode.objects.filter(batch=batch).aggregate(
        **completed_means(),
        std_reward=StdDev("reward", filter=done),
        n_failed=Count("pk", filter=Q(status=EpisodeStatus.FAILED)),
        n_cancelled=Count("pk", filter=Q(status=EpisodeStatus.CANCELLED)),
        n_running=Count("pk", filter=Q(status=EpisodeStatus.RUNNING)),
        first_started=Min("started_at"),
    )
    pace = batch_pace(
        batch=batch,
        first_started=means.pop("first_started"),
        now=timezone.now(),
        counts={key: means.pop(f"n_{key}") for key in ("failed", "cancelled", "running")},
    )
    reasons = (
        Episode.objects.filter(batch=batch)
        .exclude(termination_reason="")
        .values_list("termination_reason")
        .annotate(n=Count("pk"))
        .order_by("-n")
    )
    return {"means": rounded(means), "reasons": list(reasons), "pace": pace}


def batch_pace(
    *,
    batch: RolloutBatch,
    first_started: datetime | None,
    now: datetime,
    counts: dict[str, int],
) -> dict[str, Any]:
    """Episodes per minute since the first episode started (until the batch finished), and
    while the batch is active the time left at that rate. `counts` carries the failed,
    cancelled and running episodes, shown beside the rate."""
    end = batch.finished_at or now
    minutes = (end - first_started).total_seconds() / 60 if first_started else 0.0
    finished = batch.episodes_finished
    rate = finished / minutes if minutes > 0 and finished else None
    remaining = batch.episodes_total - finished
    active = batch.status in ACTIVE_BATCH
    eta = remaining / rate * 60 if active and rate and remaining > 0 else None
    return {
        "rate_per_min": None if rate is None else round(rate, 1),
        "eta": None if eta is None else duration_text(eta),
        "remaining": remaining,
        **counts,
    }


def duration_text(seconds: float) -> str:
    """A short wall-clock estimate: "45 s", "3 min 20 s", "2 h 5 min"."""
    whole = max(1, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def batch_groups_page(*, batch: RolloutBatch, page: int | str | None) -> Page[Any]:
    """The batch's groups with their query, reward spread and episode counts by state (the
    live page shows each group pending, running or done): a COUNT and one query."""
    done = Q(episodes__status=EpisodeStatus.COMPLETED)
    ended = Q(episodes__status__in=(EpisodeStatus.FAILED, EpisodeStatus.CANCELLED))
    groups: QuerySet[Any] = (
        RolloutGroup.objects.filter(batch=batch)
        .select_related("query")
        .defer("prefix_messages", "query__metadata")
        .annotate(
            n_completed=Count("episodes", filter=done),
            n_failed=Count("episodes", filter=ended),
            n_running=Count("episodes", filter=Q(episodes__status=EpisodeStatus.RUNNING)),
            mean_reward=Avg("episodes__reward", filter=done),
            std_reward=StdDev("episodes__reward", filter=done),
            mean_curated_recall=Avg("episodes__curated_recall", filter=done),
        )
        .order_by("pk")
    )
    return Paginator(groups, GROUPS_PER_PAGE).get_page(page)


# --- a group ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CuratedDoc:
    doc_id: str
    tag: str
    grade: int | None  # the qrel grade; None when unjudged


@dataclass(frozen=True)
class GroupSample:
    episode: Episode
    advantage: float | None  # reward minus the group's mean reward
    curated: list[CuratedDoc]
    # Later samples that ended exactly like `episode` (a deterministic policy's repeats),
    # shown on its card as "×N identical" rather than as cards of their own.
    identical: tuple[Episode, ...] = ()

    @property
    def count(self) -> int:
        return 1 + len(self.identical)


@dataclass(frozen=True)
class GroupView:
    group: RolloutGroup
    samples: list[GroupSample]
    mean_reward: float | None
    gold: dict[str, int]  # document external id -> grade, relevant ones only

    @property
    def episodes_total(self) -> int:
        return sum(sample.count for sample in self.samples)

    @property
    def zero_variance(self) -> bool:
        """Every sample earned the same reward: every advantage is 0, so GRPO-style training
        learns nothing from this group."""
        rewarded = [s for s in self.samples if s.advantage is not None]
        equal = bool(rewarded) and all(s.advantage == 0 for s in rewarded)
        return self.episodes_total > 1 and equal


# Rewards closer than this are equal: a mean of equal floats can differ from them in the
# last bit, which would print as a red -0.000 advantage.
ADVANTAGE_EPSILON = 1e-9
# What makes two samples of a group identical on the page: every figure a card shows.
SAMPLE_OUTCOME = (
    "status",
    "reward",
    "curated_recall",
    "final_answer_recall",
    "trajectory_recall",
    "turns",
    "tool_diversity",
    "termination_reason",
)


def _advantage(reward: float | None, mean: float | None) -> float | None:
    if reward is None or mean is None:
        return None
    advantage = reward - mean
    return 0.0 if abs(advantage) < ADVANTAGE_EPSILON else advantage


def _collapse_identical(samples: list[GroupSample]) -> list[GroupSample]:
    """Samples with the same outcome and final curated set folded into the first of them.

    The samples arrive sorted by reward, so identical ones are neighbours."""
    out: list[GroupSample] = []
    for sample in samples:
        previous = out[-1] if out else None
        if previous is not None and _same_outcome(previous, sample):
            out[-1] = replace(previous, identical=(*previous.identical, sample.episode))
        else:
            out.append(sample)
    return out


def _same_outcome(a: GroupSample, b: GroupSample) -> bool:
    fields = all(getattr(a.episode, f) == getattr(b.episode, f) for f in SAMPLE_OUTCOME)
    return fields and a.curated == b.curated


def group_view(*, pk: int) -> GroupView | None:
    """A group's samples, best reward first, with advantages and final curated sets;
    identical samples share one entry.

    Four queries: the group, its episodes, their curated items, the query's qrels.
    """
    group = (
        RolloutGroup.objects.select_related("batch__benchmark", "batch__policy", "query")
        .filter(pk=pk)
        .first()
    )
    if group is None:
        return None
    episodes = list(
        Episode.objects.filter(group=group).order_by(
            F("reward").desc(nulls_last=True), "sample_index"
        )
    )
    rewards = [e.reward for e in episodes if e.reward is not None]
    mean = sum(rewards) / len(rewards) if rewards else None
    grades = query_grades(query_id=group.query_id)
    curated = _curated_by_episode(group, grades)
    samples = [
        GroupSample(episode=e, advantage=_advantage(e.reward, mean), curated=curated.get(e.pk, []))
        for e in episodes
    ]
    gold = {doc: grade for doc, grade in grades.items() if grade > 0}
    return GroupView(group=group, samples=_collapse_identical(samples), mean_reward=mean, gold=gold)


def _curated_by_episode(group: RolloutGroup, grades: dict[str, int]) -> dict[int, list[CuratedDoc]]:
    rows = (
        CuratedItem.objects.filter(episode__group=group)
        .order_by("episode_id", "added_turn", "pk")
        .values_list("episode_id", "document__external_id", "tag")
    )
    out: dict[int, list[CuratedDoc]] = {}
    for episode_id, doc_id, tag in rows:
        out.setdefault(episode_id, []).append(CuratedDoc(doc_id, tag, grades.get(doc_id)))
    return out


def query_grades(*, query_id: int | None) -> dict[str, int]:
    """Document external id -> qrel grade for one query (none for a recorded episode)."""
    if query_id is None:
        return {}
    rows = Qrel.objects.filter(query_id=query_id).values_list("document__external_id", "grade")
    return dict(rows)


def rounded(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its floats to four places, as the pages and the API show figures."""
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def teacher_summary(*, batch: RolloutBatch) -> dict[str, Any] | None:
    """A teacher batch's filter rule and how its completed episodes fared: how many passed
    (and so entered the annotation queue), how many failed, and per clause how many failed
    it (an episode failing two clauses counts in both). None for other batches. One query."""
    rule = batch.teacher_rule
    if rule is None:
        return None
    verdicts = Episode.objects.filter(batch=batch, teacher_passed__isnull=False).values_list(
        "teacher_passed", "teacher_failures"
    )
    passed = failed = 0
    by_clause: Counter[str] = Counter()
    for ok, failures in verdicts:
        passed += bool(ok)
        failed += not ok
        by_clause.update(failures or [])
    return {
        "rule": rule,
        "passed": passed,
        "failed": failed,
        "clauses": [
            {"clause": key, "label": clause_label(key, rule), "failed": by_clause[key]}
            for key in RULE_KEYS  # jsonb does not keep the saved order
            if key in rule
        ],
    }
