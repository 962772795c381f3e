"""Reads for the episode list: its filters, sorts and pages, and the saved filters.

Each function answers in a fixed number of queries, whatever the number of rows (the tests
pin the counts). The API filters through the same `episode_list_queryset`
(trajectories/episode_filters.py), so list page and API never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django.core.paginator import Page, Paginator
from django.db.models import F, Q, QuerySet

from trajectories.models import Episode, SavedFilter

EPISODES_PER_PAGE = 50
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
