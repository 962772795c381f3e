"""Reads behind the annotator pages: the queue's pool and counts, the item being labelled
with its identical samples, the annotator's history, bulk actions, agreement with names,
reward-hacking candidates, and the episode's SFT exports (provenance).

Writes go through services/annotations.py; nothing here changes a row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Avg, Count, Exists, OuterRef, Q, QuerySet, Subquery

from harness_app.harness.tools import (
    CURATE,
    END_SEARCH,
    FAN_OUT_SEARCH,
    GREP_CORPUS,
    READ_DOCUMENT,
    REVIEW_DOCS,
    SEARCH_CORPUS,
    VERIFY,
)
from trajectories.episode_filters import (
    FILTER_KEYS,
    EpisodeFilterError,
    episode_filters_clean,
    episodes_matching,
)
from trajectories.models import (
    FINISHED_EPISODE,
    Annotation,
    AnnotationBulkAction,
    AnnotationEvent,
    AnnotationEventKind,
    AnnotationLabel,
    AnnotationLock,
    AnnotationStatus,
    CuratedItem,
    Episode,
    EpisodeStatus,
    Verification,
)
from trajectories.selectors.agreement import annotation_agreement
from trajectories.selectors.episode_list import RANGE_FIELDS
from trajectories.selectors.identical import identical_samples
from trajectories.selectors.turns import (
    Change,
    Gold,
    final_curation_log,
    gold_for,
    turn_rows,
    turn_views,
)

RECENT_BULK_ACTIONS = 20


# --- the queue's reads (services/annotations.py writes with them) --------------------------


def default_overlap() -> int:
    """Distinct annotators wanted per episode (settings.ANNOTATION_OVERLAP, default 1)."""
    return int(settings.ANNOTATION_OVERLAP)


def live_locks(now: datetime) -> QuerySet[AnnotationLock]:
    """The locks that still hold an episode for its annotator."""
    return AnnotationLock.objects.filter(expires_at__gt=now)


def queue_pool(*, filters: Mapping[str, Any]) -> QuerySet[Episode]:
    """Every episode the queue may hand out under cleaned filters, labelled or not."""
    # A teacher batch's episodes that failed its filter rule never enter the queue.
    return (
        episodes_matching(filters=filters)
        .filter(status=EpisodeStatus.COMPLETED)
        .exclude(teacher_passed=False)
    )


def label_family(*, annotator: Any, episode: Episode, now: datetime) -> list[int]:
    """The identical samples of `episode` that the queue page's label on it also gives (its
    "×N"): those the annotator holds with it and has not labelled, and when they relabel it,
    those they labelled the same. Never one that another annotator holds."""
    own = Annotation.objects.filter(episode=OuterRef("pk"), annotator=annotator)
    held = live_locks(now).filter(episode=OuterRef("pk"), annotator=annotator)
    reach = Q(Exists(held)) & ~Q(Exists(own))
    mine = Annotation.objects.filter(episode=episode, annotator=annotator).first()
    if mine is not None:
        reach |= Q(Exists(own.filter(label=mine.label, reason=mine.reason)))
    others = live_locks(now).filter(episode=OuterRef("pk")).exclude(annotator=annotator)
    among = Episode.objects.filter(reach).exclude(Exists(others))
    return identical_samples(episode=episode, among=among)


def reward_hacking_candidates(
    *, min_reward: float | None = None, limit: int = 50
) -> QuerySet[Episode]:
    """High-reward episodes that an annotator rejected: where the reward may be gamed.

    "High" defaults to the mean reward of approved episodes: a rejected episode scoring at
    least as well as what annotators accept is the reward model's blind spot.
    """
    if min_reward is None:
        approved = Episode.objects.filter(annotation_status=AnnotationStatus.APPROVED)
        min_reward = approved.aggregate(m=Avg("reward"))["m"]
    rejected = Q(annotations__label=AnnotationLabel.REJECT)
    episodes = Episode.objects.filter(
        annotation_status__in=[AnnotationStatus.REJECTED, AnnotationStatus.DISPUTED],
        reward__isnull=False,
    )
    if min_reward is not None:
        episodes = episodes.filter(reward__gte=min_reward)
    return (
        episodes.select_related("query", "batch__benchmark", "batch__policy")
        .annotate(rejections=Count("annotations", filter=rejected))
        .order_by("-reward", "-pk")[:limit]
    )


# An annotator may take back their latest decision for this long after making it.
UNDO_WINDOW = timedelta(minutes=10)


def annotation_undoable(*, annotator: Any, now: datetime) -> AnnotationEvent | None:
    """The annotator's latest decision if it may still be undone: made in the queue or a
    review (not a bulk action), within UNDO_WINDOW, and not undone already."""
    latest = (
        AnnotationEvent.objects.filter(
            actor=annotator, kind__in=[AnnotationEventKind.LABEL, AnnotationEventKind.UNDO]
        )
        .order_by("-created_at", "-pk")
        .first()
    )
    if latest is None or latest.kind != AnnotationEventKind.LABEL:
        return None
    if now - latest.created_at > UNDO_WINDOW:
        return None
    return latest


def bulk_targets(filters: Mapping[str, Any]) -> QuerySet[Episode]:
    """The finished episodes a bulk action with these filters would label."""
    return episodes_matching(filters=episode_filters_clean(filters)).filter(
        status__in=FINISHED_EPISODE
    )


def annotation_bulk_preview(*, filters: Mapping[str, Any]) -> int:
    """How many episodes a bulk action with these filters would label."""
    return bulk_targets(filters).count()


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
class Action:
    """One tool call of a turn, in a line: the tool, its arguments, the harness's refusal."""

    tool: str
    text: str
    error: str  # why the harness refused the call; "" when it ran


@dataclass(frozen=True)
class Step:
    """One turn of the card's compact trajectory."""

    index: int
    actions: list[Action]
    changes: list[Change]  # the curated-set diff of the turn, gold grades on each
    verdicts: list[tuple[str, str, int | None]]  # verify: (document, verdict, grade)
    format_errors: int  # this turn's


@dataclass(frozen=True)
class QueueItem:
    episode: Episode
    curated: list[CuratedRow]
    gold: dict[str, int]  # relevant documents only: external id -> grade
    mine: Annotation | None  # this annotator's own label (review mode); never anyone else's
    trajectory: list[Step] = field(default_factory=list)
    identical: list[int] = field(default_factory=list)  # the label goes to these as well

    @property
    def count(self) -> int:
        """Episodes one label here gives: this one and its identical samples."""
        return 1 + len(self.identical)


def queue_item(*, episode_id: int, annotator: Any, now: datetime) -> QueueItem | None:
    """The episode with its final curated set, relevance marks, compact trajectory and the
    identical samples a label gives as well: eight queries, three more with a sample that
    ended the same."""
    episode = (
        Episode.objects.select_related("query", "batch__benchmark", "batch__policy")
        .filter(pk=episode_id)
        .first()
    )
    if episode is None:
        return None
    gold = gold_for(query_id=episode.query_id)
    rows = (
        CuratedItem.objects.filter(episode_id=episode_id)
        .order_by("added_turn", "pk")
        .values_list("document__external_id", "document__title", "tag")
    )
    curated = [CuratedRow(doc, title, tag, gold.grade(doc)) for doc, title, tag in rows]
    relevant = {doc: gold.grades[doc] for doc in gold.relevant}
    mine = Annotation.objects.filter(episode_id=episode_id, annotator=annotator).first()
    return QueueItem(
        episode=episode,
        curated=curated,
        gold=relevant,
        mine=mine,
        trajectory=trajectory_steps(episode=episode, gold=gold),
        identical=label_family(annotator=annotator, episode=episode, now=now),
    )


# --- the compact trajectory ---------------------------------------------------------------------


def trajectory_steps(*, episode: Episode, gold: Gold) -> list[Step]:
    """Each turn in a line: what the agent did, what it changed in the curated set and
    which calls the harness refused. The per-turn replay is the viewer's (turns.py);
    three queries: turns, the curation log, verifications."""
    rows = list(turn_rows(Q(episode=episode)).defer("observation"))
    for row in rows:
        row.observation = ""  # not shown on the card: never read, nor loaded row by row
    log = final_curation_log(Q(episode=episode)).get(episode.pk, [])
    verdicts: dict[int, list[tuple[str, str, int | None]]] = {}
    found = Verification.objects.filter(episode=episode).order_by("turn_index", "pk")
    for turn, doc, verdict in found.values_list("turn_index", "document__external_id", "verdict"):
        verdicts.setdefault(turn, []).append((doc, verdict, gold.grade(doc)))
    steps = []
    for row, view in zip(rows, turn_views(rows=rows, curation_log=log, gold=gold), strict=True):
        if view.index == 0 and not row.tool_calls:
            continue  # the reset: the opening observation, no call
        refused = {r.get("call_id"): r.get("error") or "" for r in row.tool_results or []}
        actions = [
            Action(str(c.get("name", "")), action_text(c), refused.get(c.get("call_id"), ""))
            for c in row.tool_calls
        ]
        steps.append(
            Step(
                view.index, actions, view.changes, verdicts.get(view.index, []), view.format_errors
            )
        )
    return steps


def _quoted(text: Any) -> str:
    return f"“{text}”" if text else ""


def _ids(ids: Any) -> str:
    return ", ".join(map(str, ids or []))


def _curation(args: Mapping[str, Any]) -> str:
    added, removed = args.get("add_ids") or [], args.get("remove_ids") or []
    retagged = set(args.get("importance") or {}) - set(added)
    parts = [
        f"+{len(added)}" if added else "",
        f"−{len(removed)}" if removed else "",
        f"retag {len(retagged)}" if retagged else "",
    ]
    return " ".join(p for p in parts if p) or "no change asked"


# A tool's arguments in a line; the curated-set diff beside it says what a curation did.
_ARGUMENTS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    SEARCH_CORPUS: lambda a: _quoted(a.get("query")),
    FAN_OUT_SEARCH: lambda a: " · ".join(_quoted(q) for q in a.get("queries") or []),
    GREP_CORPUS: lambda a: f"/{a.get('pattern', '')}/",
    READ_DOCUMENT: lambda a: str(a.get("doc_id", "")),
    REVIEW_DOCS: lambda a: _ids(a.get("doc_ids")),
    CURATE: _curation,
    VERIFY: lambda a: f"{_quoted(a.get('claim'))} on {_ids(a.get('doc_ids'))}",
    END_SEARCH: lambda a: _quoted(a.get("reasoning")),
}


def action_text(call: Mapping[str, Any]) -> str:
    """A tool call's arguments as a line of text: queries quoted, documents by id; a call
    the harness could not read (unknown tool, arguments not an object) as it came."""
    args = call.get("arguments")
    show = _ARGUMENTS.get(str(call.get("name", "")))
    if show is None or not isinstance(args, dict):
        return json.dumps(args, ensure_ascii=False)
    return show(args)


def _decisions(annotator: Any) -> QuerySet[Annotation]:
    """The annotator's labels less the copies a label gave an item's identical samples (their
    latest label event names the episode it was given on), so `k` and `j` go item by item."""
    latest = AnnotationEvent.objects.filter(
        episode=OuterRef("episode_id"), actor=annotator, kind=AnnotationEventKind.LABEL
    ).order_by("-created_at", "-pk")
    copy_of = Subquery(latest.values("after__identical_to")[:1])
    mine = Annotation.objects.filter(annotator=annotator)
    return mine.annotate(copy_of=copy_of).filter(copy_of__isnull=True)


def last_labelled(*, annotator: Any, before: Annotation | None = None) -> Annotation | None:
    """The annotator's most recent label, or the one just before `before` (for `k`)."""
    mine = _decisions(annotator)
    if before is not None:
        mine = mine.filter(updated_at__lt=before.updated_at)
    return mine.order_by("-updated_at", "-pk").first()


def next_labelled(*, annotator: Any, after: Annotation) -> Annotation | None:
    """The annotator's label made just after `after` (for `j` in review mode)."""
    later = _decisions(annotator).filter(updated_at__gt=after.updated_at)
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
