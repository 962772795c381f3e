"""Reads for the researcher pages: the episode list, the dashboard, batches and groups.

Each function answers one page section in a fixed number of queries, whatever the number
of rows (the tests pin the counts). The episode viewer and the compare view, which rebuild
per-turn harness state, live in selectors_episode.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from django.core.paginator import Page, Paginator
from django.db.models import Avg, Count, F, Q, QuerySet, StdDev

from harness_app.models import Qrel
from trajectories.models import (
    BatchStatus,
    CuratedItem,
    Episode,
    EpisodeKind,
    EpisodeStatus,
    RolloutBatch,
    RolloutGroup,
    SavedFilter,
)

EPISODES_PER_PAGE = 50
GROUPS_PER_PAGE = 50
# Filterable numeric columns of Episode: each gets a <name>_min and <name>_max parameter.
RANGE_FIELDS = (
    "curated_recall",
    "final_answer_recall",
    "trajectory_recall",
    "reward",
    "turns",
    "tool_diversity",
    "format_errors",
)
SORTS = {
    "newest": "-pk",
    "oldest": "pk",
    "reward_desc": "-reward",
    "reward_asc": "reward",
    "curated_recall_desc": "-curated_recall",
    "curated_recall_asc": "curated_recall",
    "final_answer_recall_desc": "-final_answer_recall",
    "trajectory_recall_desc": "-trajectory_recall",
    "turns_desc": "-turns",
    "turns_asc": "turns",
}
ACTIVE_BATCH = (BatchStatus.QUEUED, BatchStatus.RUNNING)


# --- the episode list -------------------------------------------------------------------------


def episode_list_queryset(*, filters: Mapping[str, Any]) -> QuerySet[Episode]:
    """Episodes matching the list's filters (the cleaned form data), sorted.

    Every filter is on an Episode column or the denormalised batch id, so only the text
    search joins another table.
    """
    episodes = Episode.objects.select_related(
        "query", "batch__benchmark", "batch__policy", "recording"
    ).defer(
        # The list shows none of these, and metrics/timings JSON is a few hundred bytes a row.
        "metrics",
        "reward_components",
        "timings",
        "error",
        "query__metadata",
        "batch__ablation",
        "batch__reward_weights",
    )
    episodes = episodes.filter(_exact_filters(filters), _range_filters(filters))
    if filters.get("q"):
        episodes = episodes.filter(query__text__icontains=filters["q"])
    return episodes.order_by(*_ordering(filters.get("sort") or "newest"))


def _exact_filters(filters: Mapping[str, Any]) -> Q:
    q = Q()
    for name, column in (
        ("batch", "batch_id"),
        ("benchmark", "batch__benchmark_id"),
        ("policy", "batch__policy_id"),
        ("status", "status"),
        ("kind", "kind"),
        ("termination_reason", "termination_reason"),
        ("ablation", "batch__ablation_label"),
        ("query", "query_id"),
        ("annotation_status", "annotation_status"),
    ):
        value = filters.get(name)
        if value not in (None, ""):
            q &= Q(**{column: getattr(value, "pk", value)})
    return q


def _range_filters(filters: Mapping[str, Any]) -> Q:
    q = Q()
    for name in RANGE_FIELDS:
        low, high = filters.get(f"{name}_min"), filters.get(f"{name}_max")
        if low is not None:
            q &= Q(**{f"{name}__gte": low})
        if high is not None:
            q &= Q(**{f"{name}__lte": high})
    return q


def _ordering(sort: str) -> list[Any]:
    key = SORTS.get(sort, "-pk")
    if key.lstrip("-") == "pk":
        return [key]
    column = F(key.lstrip("-"))
    # Unfinished episodes have no metrics; they go last either way round.
    ordered = column.desc(nulls_last=True) if key.startswith("-") else column.asc(nulls_last=True)
    return [ordered, "-pk"]


def episode_list_page(*, filters: Mapping[str, Any], page: int | str | None) -> Page[Episode]:
    """One page of the filtered list in three queries: a COUNT, the page's ids, its rows.

    The ids come from the episode table alone, so PostgreSQL sorts and skips (OFFSET) over
    narrow rows and joins the query, batch, benchmark and policy for 50 rows only; joined
    before the sort, a filter matching half of 100,000 episodes took 110 ms instead of 40.
    """
    matching = episode_list_queryset(filters=filters)
    page_of_ids = Paginator(matching.values_list("pk", flat=True), EPISODES_PER_PAGE).get_page(page)
    ids = list(page_of_ids.object_list)
    rows = matching.order_by().in_bulk(ids)
    page_of_rows = cast("Page[Episode]", page_of_ids)
    page_of_rows.object_list = [rows[pk] for pk in ids]
    return page_of_rows


def saved_filters_of(*, user: Any) -> list[SavedFilter]:
    if not getattr(user, "pk", None):
        return []
    return list(SavedFilter.objects.filter(user_id=user.pk).order_by("name"))


def termination_reasons() -> list[str]:
    """The reasons recorded so far, for the filter's choices (one indexed DISTINCT)."""
    rows = Episode.objects.exclude(termination_reason="").values_list(
        "termination_reason", flat=True
    )
    return sorted(set(rows.order_by().distinct()))


# --- the dashboard ----------------------------------------------------------------------------


def batches_recent(*, limit: int = 10) -> list[RolloutBatch]:
    batches = RolloutBatch.objects.select_related("benchmark", "policy", "created_by")
    return list(batches.order_by("-created_at", "-pk")[:limit])


def batches_any_active(batches: list[RolloutBatch]) -> bool:
    return any(b.status in ACTIVE_BATCH for b in batches)


def condition_rows() -> list[dict[str, Any]]:
    """Means per benchmark × policy × ablation over completed episodes, plus failures.

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
        )
        # Aliases must not shadow Episode's columns, or Avg would read the aggregate.
        .annotate(
            n=Count("pk", filter=done),
            errors=Count("pk", filter=Q(status=EpisodeStatus.FAILED)),
            mean_curated_recall=Avg("curated_recall", filter=done),
            mean_trajectory_recall=Avg("trajectory_recall", filter=done),
            mean_final_answer_recall=Avg("final_answer_recall", filter=done),
            mean_tool_diversity=Avg("tool_diversity", filter=done),
            mean_turns=Avg("turns", filter=done),
            mean_reward=Avg("reward", filter=done),
        )
        .order_by("benchmark", "policy", "ablation")
    )
    return [_rounded(row) for row in rows]


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def dashboard_data() -> dict[str, Any]:
    """The dashboard's rollout sections: recent batches, per-condition means, charts."""
    batches = batches_recent()
    rows = condition_rows()
    return {
        "batches": batches,
        "any_active": batches_any_active(batches),
        "conditions": rows,
        "charts": dashboard_charts(rows),
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


# --- batches ----------------------------------------------------------------------------------


def batch_get(*, pk: int) -> RolloutBatch | None:
    return (
        RolloutBatch.objects.select_related("benchmark", "policy", "created_by")
        .filter(pk=pk)
        .first()
    )


def batch_metrics(*, batch: RolloutBatch) -> dict[str, Any]:
    """Means over the batch's completed episodes and its termination reasons: two queries."""
    done = Q(status=EpisodeStatus.COMPLETED)
    means = Episode.objects.filter(batch=batch).aggregate(
        n=Count("pk", filter=done),
        mean_curated_recall=Avg("curated_recall", filter=done),
        mean_final_answer_recall=Avg("final_answer_recall", filter=done),
        mean_trajectory_recall=Avg("trajectory_recall", filter=done),
        mean_tool_diversity=Avg("tool_diversity", filter=done),
        mean_turns=Avg("turns", filter=done),
        mean_reward=Avg("reward", filter=done),
        std_reward=StdDev("reward", filter=done),
    )
    reasons = (
        Episode.objects.filter(batch=batch)
        .exclude(termination_reason="")
        .values_list("termination_reason")
        .annotate(n=Count("pk"))
        .order_by("-n")
    )
    return {"means": _rounded(means), "reasons": list(reasons)}


def batch_groups_page(*, batch: RolloutBatch, page: int | str | None) -> Page[Any]:
    """The batch's groups with their query and reward spread: a COUNT and one query."""
    done = Q(episodes__status=EpisodeStatus.COMPLETED)
    groups: QuerySet[Any] = (
        RolloutGroup.objects.filter(batch=batch)
        .select_related("query")
        .defer("prefix_messages", "query__metadata")
        .annotate(
            n_completed=Count("episodes", filter=done),
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


@dataclass(frozen=True)
class GroupView:
    group: RolloutGroup
    samples: list[GroupSample]
    mean_reward: float | None
    gold: dict[str, int]  # document external id -> grade, relevant ones only


def group_view(*, pk: int) -> GroupView | None:
    """A group's samples, best reward first, with advantages and final curated sets.

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
        GroupSample(
            episode=e,
            advantage=None if e.reward is None or mean is None else e.reward - mean,
            curated=curated.get(e.pk, []),
        )
        for e in episodes
    ]
    gold = {doc: grade for doc, grade in grades.items() if grade > 0}
    return GroupView(group=group, samples=samples, mean_reward=mean, gold=gold)


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
