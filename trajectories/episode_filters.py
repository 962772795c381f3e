"""Episode filters as plain data: checked once, then applied by the UI's own list query.

The API's query parameters, an SFT export's saved filters, `export_sft --filter key=value`
and bulk annotation actions all describe episodes the same way, so one function checks
them (naming the bad key) and one applies them. Applying reuses the researcher list's
`episode_list_queryset` (selectors/episode_list.py), so the API and the pages can never
disagree about what a filter means; the annotation status is read from the denormalised
Episode column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from harness_app.ids import as_id, id_problem
from trajectories.models import AnnotationStatus, Episode, EpisodeKind, EpisodeStatus
from trajectories.selectors.episode_list import RANGE_FIELDS, episode_list_queryset

ID_FILTERS = ("batch", "benchmark", "policy", "query")
TEXT_FILTERS = ("termination_reason", "ablation", "q")
CHOICE_FILTERS: dict[str, list[str]] = {
    "status": list(EpisodeStatus.values),
    "kind": list(EpisodeKind.values),
    "annotation_status": list(AnnotationStatus.values),
}
RANGE_FILTERS = tuple(f"{name}_{end}" for name in RANGE_FIELDS for end in ("min", "max"))
# Chosen episodes by id (the list's row selection): "3,7,12" or a JSON list.
ID_LIST_FILTERS = ("ids",)
MAX_IDS = 1000
FILTER_KEYS = (*ID_FILTERS, *ID_LIST_FILTERS, *TEXT_FILTERS, *CHOICE_FILTERS, *RANGE_FILTERS)


class EpisodeFilterError(ValueError):
    """A filter that cannot be applied; `key` names it and the message says why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"filter {key!r}: {message}")
        self.key = key
        self.detail = message


def _as_id(key: str, value: Any) -> int:
    number = as_id(value)
    if number is None:
        raise EpisodeFilterError(key, id_problem(value))
    return number


def _as_ids(key: str, value: Any) -> list[int]:
    items = value if isinstance(value, list) else str(value).split(",")
    ids = sorted({_as_id(key, item) for item in items if str(item).strip()})
    if not ids:
        raise EpisodeFilterError(key, "no episode id given")
    if len(ids) > MAX_IDS:
        raise EpisodeFilterError(key, f"at most {MAX_IDS} ids, got {len(ids)}")
    return ids


def _as_float(key: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise EpisodeFilterError(key, f"expected a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise EpisodeFilterError(key, f"expected a finite number, got {value!r}")
    return number


def _as_text(key: str, value: Any) -> str:
    text = str(value).strip()
    if len(text) > 500:
        raise EpisodeFilterError(key, "at most 500 characters")
    if "\x00" in text:
        raise EpisodeFilterError(key, "NUL characters are not allowed")
    return text


def _choice(key: str) -> Callable[[str, Any], str]:
    def check(_: str, value: Any) -> str:
        text = str(value).strip()
        if text not in CHOICE_FILTERS[key]:
            raise EpisodeFilterError(
                key, f"{text!r} is not one of {', '.join(CHOICE_FILTERS[key])}"
            )
        return text

    return check


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(ID_FILTERS, _as_id),
    **dict.fromkeys(ID_LIST_FILTERS, _as_ids),
    **dict.fromkeys(TEXT_FILTERS, _as_text),
    **{key: _choice(key) for key in CHOICE_FILTERS},
    **dict.fromkeys(RANGE_FILTERS, _as_float),
}


def episode_filters_clean(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Typed filters from strings (query parameters, `key=value`) or JSON values.

    Empty values mean "no filter" and are dropped; an unknown key is an error rather than
    silently matching everything.
    """
    cleaned: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _PARSERS:
            raise EpisodeFilterError(key, f"unknown filter; use one of {', '.join(FILTER_KEYS)}")
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        cleaned[key] = _PARSERS[key](key, value)
    for name in RANGE_FIELDS:
        low, high = cleaned.get(f"{name}_min"), cleaned.get(f"{name}_max")
        if low is not None and high is not None and low > high:
            raise EpisodeFilterError(f"{name}_min", f"{low} is above {name}_max {high}")
    return cleaned


def episodes_matching(*, filters: Mapping[str, Any]) -> QuerySet[Episode]:
    """Episodes matching cleaned filters (see `episode_filters_clean`), newest first."""
    shared = {k: v for k, v in filters.items() if k != "annotation_status"}
    episodes = episode_list_queryset(filters=shared)
    if filters.get("annotation_status"):
        episodes = episodes.filter(annotation_status=filters["annotation_status"])
    return episodes.order_by("-pk")


# --- why a filter matches no episode -----------------------------------------------------------

# The order in which clauses are counted to explain an empty result: the episodes chosen by
# id first, then what picks batches and queries, the episode's own columns, the metric
# ranges, and the annotation status last (an SFT export adds "approved only" by default).
# A clause this list does not name is counted just before the annotation status.
CLAUSE_ORDER = (*ID_LIST_FILTERS, *ID_FILTERS, "kind", "status", *TEXT_FILTERS, *RANGE_FILTERS)


@dataclass(frozen=True)
class FilterClause:
    """One clause of a filter and the episodes left by it and every clause before it."""

    key: str
    value: Any
    matching: int

    @property
    def label(self) -> str:
        """The clause as people read it: `batch=3`, `ids (12 chosen)`."""
        if self.key in ID_LIST_FILTERS:
            return f"{self.key} ({len(self.value)} chosen)"
        return f"{self.key}={self.value}"


def _clause_rank(key: str) -> int:
    if key == "annotation_status":
        return len(CLAUSE_ORDER) + 1
    return CLAUSE_ORDER.index(key) if key in CLAUSE_ORDER else len(CLAUSE_ORDER)


def episode_filter_clauses(*, filters: Mapping[str, Any]) -> list[FilterClause]:
    """Cleaned filters counted clause by clause, in CLAUSE_ORDER, each with the clauses
    before it; the list ends at the first clause that leaves no episode. One count query a
    clause."""
    applied: dict[str, Any] = {}
    clauses: list[FilterClause] = []
    for key in sorted(filters, key=_clause_rank):
        applied[key] = filters[key]
        matching = episodes_matching(filters=applied).count()
        clauses.append(FilterClause(key=key, value=filters[key], matching=matching))
        if not matching:
            break
    return clauses


def episode_filters_empty_reason(
    clauses: Sequence[FilterClause], *, notes: Mapping[str, str] | None = None
) -> str:
    """Why filters match no episode, naming the first clause that took the count to 0
    (`clauses` from `episode_filter_clauses`); `notes` add a word to a clause by key. Empty
    when the last clause still leaves episodes."""
    if clauses and clauses[-1].matching:
        return ""
    if not clauses:
        return "" if Episode.objects.exists() else "0 episodes: there are no episodes yet"

    def said(clause: FilterClause) -> str:
        note = (notes or {}).get(clause.key)
        return f"{clause.label} ({note})" if note else clause.label

    *before, emptying = clauses
    if not before:
        return f"0 episodes: no episode matches {said(emptying)}"
    left = before[-1].matching
    matched = "1 episode matches" if left == 1 else f"{left} episodes match"
    none = "it does not match" if left == 1 else "none of them matches"
    return (
        f"0 episodes: {matched} {' and '.join(said(c) for c in before)}, "
        f"but {none} {said(emptying)}"
    )
