"""Reads behind the annotator pages: the item being labelled, the annotator's history,
bulk actions, agreement with names, and the episode's SFT exports (provenance).

Writes go through services/annotations.py; nothing here changes a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from trajectories.episode_filters import FILTER_KEYS, EpisodeFilterError, episode_filters_clean
from trajectories.models import (
    Annotation,
    AnnotationBulkAction,
    AnnotationEvent,
    AnnotationEventKind,
    AnnotationLabel,
    AnnotationLock,
    CuratedItem,
    Episode,
)
from trajectories.selectors.batches import query_grades
from trajectories.selectors.episode_list import RANGE_FIELDS
from trajectories.services.annotations import (
    annotation_agreement,
    default_overlap,
    queue_pool,
)

RECENT_BULK_ACTIONS = 20


# --- filters from GET/POST parameters -------------------------------------------------------


@dataclass(frozen=True)
class QueueFilters:
    raw: dict[str, str]  # the non-empty parameters, as given, for forms and links
    cleaned: dict[str, Any]  # checked by episode_filters_clean; {} when there is an error
    error: str  # why the filters were ignored, or ""


def filters_from(params: Mapping[str, Any]) -> QueueFilters:
    """The episode filters among request parameters; a bad one is reported and all ignored."""
    raw = {k: str(params.get(k, "")).strip() for k in FILTER_KEYS}
    raw = {k: v for k, v in raw.items() if v}
    try:
        return QueueFilters(raw=raw, cleaned=episode_filters_clean(raw), error="")
    except EpisodeFilterError as exc:
        return QueueFilters(raw=raw, cleaned={}, error=str(exc))


def filter_fields(raw: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(name, label, value) for the filter form's text inputs, in a stable order; benchmark
    and policy are dropdowns, drawn from the episode list's filter form."""
    plain = [
        ("ids", "Episode ids"),
        ("batch", "Batch #"),
        ("ablation", "Ablation label"),
        ("termination_reason", "Termination reason"),
        ("q", "Query text contains"),
    ]
    ranges = [
        (f"{name}_{end}", f"{name.replace('_', ' ').capitalize()} {end}")
        for name in RANGE_FIELDS
        for end in ("min", "max")
    ]
    return [(key, label, raw.get(key, "")) for key, label in [*plain, *ranges]]


# --- progress ------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueCounts:
    mine_done: int  # episodes under the filter this annotator labelled
    mine_left: int  # episodes that still want a label and not yet theirs (skipped included)
    mine_skipped: int  # of those, ones this annotator skipped
    done: int  # episodes with all the labels the overlap asks for
    total: int  # every episode the queue may hand out under the filter

    @property
    def left(self) -> int:
        return self.total - self.done


def queue_counts(
    *, annotator: Any, filters: Mapping[str, Any], overlap: int | None = None
) -> QueueCounts:
    """Done and remaining under cleaned filters, for this annotator and overall. One query."""
    overlap = default_overlap() if overlap is None else overlap
    mine = Exists(Annotation.objects.filter(episode=OuterRef("pk"), annotator=annotator))
    skipped = Exists(
        AnnotationEvent.objects.filter(
            episode=OuterRef("pk"), actor=annotator, kind=AnnotationEventKind.SKIP
        )
    )
    open_ = Q(annotation_count__lt=overlap) & ~Q(mine)
    counts = queue_pool(filters=filters).aggregate(
        mine_done=Count("pk", filter=Q(mine)),
        mine_left=Count("pk", filter=open_),
        mine_skipped=Count("pk", filter=open_ & Q(skipped)),
        done=Count("pk", filter=Q(annotation_count__gte=overlap)),
        total=Count("pk"),
    )
    return QueueCounts(**counts)


# --- the item being labelled ----------------------------------------------------------------


@dataclass(frozen=True)
class CuratedRow:
    doc_id: str
    title: str
    tag: str
    grade: int | None  # qrel grade; None when unjudged


@dataclass(frozen=True)
class QueueItem:
    episode: Episode
    curated: list[CuratedRow]
    gold: dict[str, int]  # relevant documents only: external id -> grade
    mine: Annotation | None  # this annotator's own label (review mode); never anyone else's


def queue_item(*, episode_id: int, annotator: Any) -> QueueItem | None:
    """The episode with its final curated set and relevance marks. Four queries."""
    episode = (
        Episode.objects.select_related("query", "batch__benchmark", "batch__policy")
        .filter(pk=episode_id)
        .first()
    )
    if episode is None:
        return None
    grades = query_grades(query_id=episode.query_id)
    rows = (
        CuratedItem.objects.filter(episode_id=episode_id)
        .order_by("added_turn", "pk")
        .values_list("document__external_id", "document__title", "tag")
    )
    curated = [CuratedRow(doc, title, tag, grades.get(doc)) for doc, title, tag in rows]
    gold = {doc: grade for doc, grade in grades.items() if grade > 0}
    mine = Annotation.objects.filter(episode_id=episode_id, annotator=annotator).first()
    return QueueItem(episode=episode, curated=curated, gold=gold, mine=mine)


def last_labelled(*, annotator: Any, before: Annotation | None = None) -> Annotation | None:
    """The annotator's most recent label, or the one just before `before` (for `k`)."""
    mine = Annotation.objects.filter(annotator=annotator)
    if before is not None:
        mine = mine.filter(updated_at__lt=before.updated_at)
    return mine.order_by("-updated_at", "-pk").first()


def next_labelled(*, annotator: Any, after: Annotation) -> Annotation | None:
    """The annotator's label made just after `after` (for `j` in review mode)."""
    later = Annotation.objects.filter(annotator=annotator, updated_at__gt=after.updated_at)
    return later.order_by("updated_at", "pk").first()


def held_by_another(*, episode_id: int, annotator: Any, now: Any) -> bool:
    """Whether another annotator holds a live lock on the episode."""
    return (
        AnnotationLock.objects.filter(episode_id=episode_id, expires_at__gt=now)
        .exclude(annotator=annotator)
        .exists()
    )


# --- bulk actions, agreement --------------------------------------------------------------------


def bulk_actions_recent() -> QuerySet[AnnotationBulkAction]:
    return AnnotationBulkAction.objects.select_related("actor", "undone_by").order_by(
        "-created_at", "-pk"
    )[:RECENT_BULK_ACTIONS]


def agreement_view(*, filters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`annotation_agreement` with annotator names instead of ids. Two queries."""
    agreement = annotation_agreement(filters=filters)
    ids = {a for pair in agreement["cohen"] for a in pair["annotators"]}
    names = dict(
        get_user_model()
        .objects.filter(pk__in=ids)
        .values_list("pk", get_user_model().USERNAME_FIELD)
    )
    pairs = [
        {**pair, "names": [names.get(a, f"user {a}") for a in pair["annotators"]]}
        for pair in agreement["cohen"]
    ]
    return {"cohen": pairs, "fleiss": agreement["fleiss"]}


# --- judgements shown to researchers ------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeAnnotations:
    rows: list[Annotation]  # newest first, with their annotators
    hidden: int  # others' labels left out for an annotator (labelling is blind)


def episode_annotations(*, episode: Episode, viewer: Any, blind: bool) -> EpisodeAnnotations:
    """Every judgement on the episode for a researcher; for an annotator (`blind`), only
    their own, with how many others there are. One query."""
    rows = list(
        Annotation.objects.filter(episode=episode)
        .select_related("annotator")
        .order_by("-updated_at", "-pk")
    )
    if not blind:
        return EpisodeAnnotations(rows=rows, hidden=0)
    own = [a for a in rows if a.annotator_id == viewer.pk]
    return EpisodeAnnotations(rows=own, hidden=len(rows) - len(own))


def rejections_by_episode(
    *, episode_ids: list[int], viewer: Any, blind: bool
) -> dict[int, list[Annotation]]:
    """The rejections (annotator, reason, notes) of each episode, newest first; an annotator
    (`blind`) sees only their own. One query."""
    rows = Annotation.objects.filter(episode_id__in=episode_ids, label=AnnotationLabel.REJECT)
    if blind:
        rows = rows.filter(annotator=viewer)
    out: dict[int, list[Annotation]] = {pk: [] for pk in episode_ids}
    for row in rows.select_related("annotator").order_by("-updated_at", "-pk"):
        out[row.episode_id].append(row)
    return out
