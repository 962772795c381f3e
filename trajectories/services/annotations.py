"""Annotations: the queue that hands episodes to annotators, labels, bulk actions, agreement.

Every write goes through a function here, and each keeps `Episode.annotation_status` and
`Episode.annotation_count` in step with the labels, so filters and SFT exports read one
indexed column. The status rule (`status_from_labels`): any flag → flagged; approvals and
rejections together → disputed; only approvals → approved; only rejections → rejected.
SFT exports take approved episodes by default.

The queue (`annotation_next`) gives each annotator one episode at a time under an
`AnnotationLock`; the lock's unique episode column guarantees that two annotators never
hold the same episode at once, and an expired lock is simply taken over. An episode keeps
coming back to the queue until `overlap` distinct annotators have labelled it, and the
queue never shows an annotator what the others said. Of a teacher batch's episodes, only
those that passed the batch's filter rule (teacher_rule.py) are queued.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Avg, Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from trajectories.episode_filters import episode_filters_clean, episodes_matching
from trajectories.models import (
    FINISHED_EPISODE,
    Annotation,
    AnnotationBulkAction,
    AnnotationEvent,
    AnnotationEventKind,
    AnnotationLabel,
    AnnotationLock,
    AnnotationStatus,
    Episode,
    EpisodeStatus,
)

MAX_OVERLAP = 20
CANDIDATES_PER_ROUND = 20
# An annotator may take back their latest decision for this long after making it.
UNDO_WINDOW = timedelta(minutes=10)


class AnnotationError(ValueError):
    """An annotation request that cannot be carried out; the message says why and `field`
    names the input at fault ("" when it is the request as a whole)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def default_overlap() -> int:
    """Distinct annotators wanted per episode (settings.ANNOTATION_OVERLAP, default 1)."""
    return int(settings.ANNOTATION_OVERLAP)


def lock_ttl() -> timedelta:
    """How long a taken episode stays with its annotator (ANNOTATION_LOCK_TTL_S, 15 min)."""
    return timedelta(seconds=int(settings.ANNOTATION_LOCK_TTL_S))


# --- the status rule ----------------------------------------------------------------------


def status_from_labels(labels: Iterable[str]) -> str:
    seen = set(labels)
    if not seen:
        return AnnotationStatus.NONE
    if AnnotationLabel.FLAG in seen:
        return AnnotationStatus.FLAGGED
    if seen == {AnnotationLabel.APPROVE}:
        return AnnotationStatus.APPROVED
    if AnnotationLabel.APPROVE in seen:
        return AnnotationStatus.DISPUTED
    return AnnotationStatus.REJECTED


def _status_refresh(episode_ids: Iterable[int]) -> None:
    """Recompute the denormalised status and count: one read, one UPDATE per outcome."""
    ids = set(episode_ids)
    labels: dict[int, list[str]] = {pk: [] for pk in ids}
    rows = Annotation.objects.filter(episode_id__in=ids).values_list("episode_id", "label")
    for episode_id, label in rows:
        labels[episode_id].append(label)
    outcomes: dict[tuple[str, int], list[int]] = defaultdict(list)
    for episode_id, found in labels.items():
        outcomes[(status_from_labels(found), len(found))].append(episode_id)
    for (status, count), members in outcomes.items():
        Episode.objects.filter(pk__in=members).update(
            annotation_status=status, annotation_count=count
        )


def _snapshot(annotation: Annotation | None) -> dict[str, str] | None:
    if annotation is None:
        return None
    return {"label": annotation.label, "reason": annotation.reason, "notes": annotation.notes}


# --- labelling ----------------------------------------------------------------------------


def label_check(*, label: str, reason: str) -> None:
    """Refuse a label the rules do not allow; the pages check a bulk preview with it too."""
    if label not in AnnotationLabel.values:
        raise AnnotationError(
            f"label {label!r} is not one of {', '.join(AnnotationLabel.values)}", field="label"
        )
    if len(reason) > 200:
        raise AnnotationError(
            f"reason is {len(reason)} characters long; at most 200", field="reason"
        )
    # The guidelines ask for a reason with every rejection: researchers read it beside the
    # reward ("Reward vs judgement"), and a bare "reject" tells them nothing.
    if label == AnnotationLabel.REJECT and not reason.strip():
        raise AnnotationError("a rejection needs a reason: choose one", field="reason")


@transaction.atomic
def annotation_label(
    *, annotator: Any, episode: Episode, label: str, reason: str = "", notes: str = ""
) -> Annotation:
    """Record (or change) this annotator's label on the episode and release their lock."""
    label_check(label=label, reason=reason)
    # The row lock serialises concurrent labels of one episode, so the status is right.
    episode = Episode.objects.select_for_update().get(pk=episode.pk)
    if episode.status not in FINISHED_EPISODE:
        raise AnnotationError(f"episode {episode.pk} is {episode.status}; label it once it ends")
    # Another annotator holds it from the queue: labelling it now (as the API could) would
    # break the queue's promise that one annotator works an episode at a time. Who holds
    # it is not said: annotators label blind.
    held = _live_locks(timezone.now()).filter(episode=episode).exclude(annotator=annotator)
    until = held.values_list("expires_at", flat=True).first()
    if until is not None:
        raise AnnotationError(
            f"episode {episode.pk} is being labelled by another annotator until "
            f"{until:%H:%M:%S} UTC; take your next episode from the queue",
            field="episode",
        )
    existing = Annotation.objects.filter(episode=episode, annotator=annotator).first()
    before = _snapshot(existing)
    annotation = existing or Annotation(episode=episode, annotator=annotator)
    annotation.label, annotation.reason, annotation.notes = label, reason, notes
    annotation.save()
    AnnotationLock.objects.filter(episode=episode, annotator=annotator).delete()
    AnnotationEvent.objects.create(
        actor=annotator,
        kind=AnnotationEventKind.LABEL,
        episode=episode,
        before=before,
        after=_snapshot(annotation),
    )
    _status_refresh([episode.pk])
    return annotation


# --- the queue ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Assignment:
    episode: Episode
    expires_at: datetime


def _live_locks(now: datetime) -> QuerySet[AnnotationLock]:
    return AnnotationLock.objects.filter(expires_at__gt=now)


def _held(annotator: Any, now: datetime) -> Assignment | None:
    """The annotator's live lock on an episode they have not labelled yet, if any."""
    lock = (
        _live_locks(now)
        .filter(annotator=annotator)
        .exclude(episode__annotations__annotator=annotator)
        .select_related("episode")
        .first()
    )
    return Assignment(episode=lock.episode, expires_at=lock.expires_at) if lock else None


def queue_pool(*, filters: Mapping[str, Any]) -> QuerySet[Episode]:
    """Every episode the queue may hand out under cleaned filters, labelled or not."""
    # A teacher batch's episodes that failed its filter rule never enter the queue.
    return (
        episodes_matching(filters=filters)
        .filter(status=EpisodeStatus.COMPLETED)
        .exclude(teacher_passed=False)
    )


def _candidate_ids(
    annotator: Any, filters: Mapping[str, Any], overlap: int, now: datetime
) -> list[int]:
    taken = _live_locks(now).filter(episode=OuterRef("pk"))
    mine = Annotation.objects.filter(episode=OuterRef("pk"), annotator=annotator)
    skips = AnnotationEvent.objects.filter(
        episode=OuterRef("pk"), actor=annotator, kind=AnnotationEventKind.SKIP
    )
    episodes = (
        queue_pool(filters=filters)
        .filter(annotation_count__lt=overlap)
        .filter(~Exists(taken), ~Exists(mine))
        .annotate(skipped_at=Subquery(skips.order_by("-created_at").values("created_at")[:1]))
        # Never-skipped first, then the longest-skipped; among those, episodes already
        # labelled by others first: overlap sets complete sooner.
        .order_by(F("skipped_at").asc(nulls_first=True), "-annotation_count", "pk")
    )
    return list(episodes.values_list("pk", flat=True)[:CANDIDATES_PER_ROUND])


def _lock_take(episode_id: int, annotator: Any, now: datetime) -> AnnotationLock | None:
    """Take the episode unless another annotator holds it; None when somebody does."""
    # Skip an episode another queue call is taking right now (PostgreSQL), rather than
    # wait for it; the unique constraint below is the guarantee either way.
    if not Episode.objects.select_for_update(skip_locked=True).filter(pk=episode_id).exists():
        return None
    AnnotationLock.objects.filter(episode_id=episode_id, expires_at__lte=now).delete()
    try:
        with transaction.atomic():
            return AnnotationLock.objects.create(
                episode_id=episode_id, annotator=annotator, expires_at=now + lock_ttl()
            )
    except IntegrityError:
        return None


@transaction.atomic
def annotation_next(
    *, annotator: Any, filters: Mapping[str, Any] | None = None, overlap: int | None = None
) -> Assignment | None:
    """The next episode for this annotator, locked to them; None when the queue is empty.

    An annotator holding an unlabelled episode gets it back, so reloading the page does not
    skip it. Only completed episodes are queued. `filters` are raw episode filters.
    """
    overlap = default_overlap() if overlap is None else overlap
    if not 1 <= overlap <= MAX_OVERLAP:
        raise AnnotationError(f"overlap must be between 1 and {MAX_OVERLAP}, got {overlap}")
    cleaned = episode_filters_clean(filters or {})
    now = timezone.now()
    held = _held(annotator, now)
    if held is not None:
        return held
    AnnotationLock.objects.filter(annotator=annotator).delete()  # stale ones, now done with
    for episode_id in _candidate_ids(annotator, cleaned, overlap, now):
        lock = _lock_take(episode_id, annotator, now)
        if lock is not None:
            AnnotationEvent.objects.create(
                actor=annotator, kind=AnnotationEventKind.LOCK, episode_id=episode_id
            )
            episode = Episode.objects.select_related("query", "batch").get(pk=episode_id)
            return Assignment(episode=episode, expires_at=lock.expires_at)
    return None


@transaction.atomic
def annotation_skip(*, annotator: Any, episode: Episode) -> None:
    """Put the episode back for now: the annotator's lock goes, and their queue hands it out
    again only after every episode they never skipped (skipped ones come back oldest skip
    first). Others are not affected. Refused on an episode the annotator does not hold."""
    lock = AnnotationLock.objects.filter(episode=episode, annotator=annotator).first()
    if lock is None:
        raise AnnotationError(f"episode {episode.pk} is not yours to skip: take it from the queue")
    lock.delete()
    AnnotationEvent.objects.create(actor=annotator, kind=AnnotationEventKind.SKIP, episode=episode)


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


@transaction.atomic
def annotation_undo(*, annotator: Any, episode: Episode) -> Annotation | None:
    """Take back the annotator's latest decision, on `episode`: their label before it comes
    back (none: the episode is theirs to label again, locked to them when free). Returns
    the restored label, or None. Only the latest, within UNDO_WINDOW, and only while the
    label is still what that decision made it."""
    episode = Episode.objects.select_for_update().get(pk=episode.pk)
    now = timezone.now()
    event = annotation_undoable(annotator=annotator, now=now)
    if event is None or event.episode_id != episode.pk:
        minutes = int(UNDO_WINDOW.total_seconds() // 60)
        raise AnnotationError(
            f"only your latest decision can be undone, within {minutes} minutes of making it"
        )
    current = Annotation.objects.filter(episode=episode, annotator=annotator).first()
    if current is None or current.updated_at > event.created_at:
        raise AnnotationError(f"your label on episode {episode.pk} changed since; relabel it")
    _restore(current, event.before)
    AnnotationEvent.objects.create(
        actor=annotator,
        kind=AnnotationEventKind.UNDO,
        episode=episode,
        before=event.after,
        after=event.before,
    )
    _status_refresh([episode.pk])
    if event.before is not None:
        return current
    # Back in the queue: the episode becomes this annotator's current item again.
    AnnotationLock.objects.filter(annotator=annotator).exclude(episode=episode).delete()
    _lock_take(episode.pk, annotator, now)
    return None


# --- bulk actions -------------------------------------------------------------------------


def _bulk_targets(filters: Mapping[str, Any]) -> QuerySet[Episode]:
    return episodes_matching(filters=episode_filters_clean(filters)).filter(
        status__in=FINISHED_EPISODE
    )


def annotation_bulk_preview(*, filters: Mapping[str, Any]) -> int:
    """How many episodes a bulk action with these filters would label."""
    return _bulk_targets(filters).count()


@transaction.atomic
def annotation_bulk_apply(
    *,
    actor: Any,
    filters: Mapping[str, Any],
    label: str,
    reason: str = "",
    every_episode: bool = False,
) -> AnnotationBulkAction:
    """Give every finished episode the filters match `actor`'s label, in one transaction.

    Each episode's previous label by `actor` is kept in its event, for the undo. No
    filters would mean every finished episode: refused unless `every_episode` says so.
    """
    label_check(label=label, reason=reason)
    if not filters and not every_episode:
        raise AnnotationError(
            "no filters: a bulk action would label every finished episode; give a filter, "
            "or say that every episode is meant (every_episode)",
            field="filters",
        )
    ids = list(_bulk_targets(filters).values_list("pk", flat=True))
    action = AnnotationBulkAction.objects.create(
        actor=actor, filters=dict(filters), label=label, reason=reason, episodes=len(ids)
    )
    existing = {
        a.episode_id: a for a in Annotation.objects.filter(annotator=actor, episode_id__in=ids)
    }
    before = {pk: _snapshot(a) for pk, a in existing.items()}
    now = timezone.now()
    for annotation in existing.values():
        annotation.label, annotation.reason, annotation.updated_at = label, reason, now
    Annotation.objects.bulk_update(existing.values(), ["label", "reason", "updated_at"])
    Annotation.objects.bulk_create(
        Annotation(episode_id=pk, annotator=actor, label=label, reason=reason)
        for pk in ids
        if pk not in existing
    )
    after = {"label": label, "reason": reason}
    AnnotationEvent.objects.bulk_create(
        AnnotationEvent(
            actor=actor,
            kind=AnnotationEventKind.BULK_LABEL,
            episode_id=pk,
            bulk_action=action,
            before=before.get(pk),
            after={**after, "notes": existing[pk].notes if pk in existing else ""},
        )
        for pk in ids
    )
    _status_refresh(ids)
    return action


@transaction.atomic
def annotation_bulk_undo(*, action: AnnotationBulkAction, actor: Any) -> int:
    """Put back what the bulk action's annotator had before it; returns episodes restored.

    An episode whose label was changed again after the bulk action keeps the newer label.
    """
    action = AnnotationBulkAction.objects.select_for_update().get(pk=action.pk)
    if action.undone_at is not None:
        raise AnnotationError(f"bulk action {action.pk} was already undone")
    events = list(action.events.filter(kind=AnnotationEventKind.BULK_LABEL))
    current = {
        a.episode_id: a
        for a in Annotation.objects.filter(
            annotator_id=action.actor_id, episode_id__in=[e.episode_id for e in events]
        )
    }
    restored = [e for e in events if _unchanged_since(current.get(e.episode_id or 0), e)]
    for event in restored:
        _restore(current[event.episode_id or 0], event.before)
    AnnotationEvent.objects.bulk_create(
        AnnotationEvent(
            actor=actor,
            kind=AnnotationEventKind.BULK_UNDO,
            episode_id=e.episode_id,
            bulk_action=action,
            before=e.after,
            after=e.before,
        )
        for e in restored
    )
    _status_refresh(e.episode_id for e in restored if e.episode_id)
    action.undone_at, action.undone_by = timezone.now(), actor
    action.save(update_fields=["undone_at", "undone_by"])
    return len(restored)


def _unchanged_since(annotation: Annotation | None, event: AnnotationEvent) -> bool:
    """Whether the annotation is still what the bulk action made it.

    The action stamps `updated_at` before it writes its events, so only a later edit
    moves `updated_at` past the event's time.
    """
    after = event.after or {}
    return (
        annotation is not None
        and annotation.label == after.get("label")
        and annotation.reason == after.get("reason")
        and annotation.updated_at <= event.created_at
    )


def _restore(annotation: Annotation, before: dict[str, str] | None) -> None:
    if before is None:
        annotation.delete()
        return
    annotation.label, annotation.reason = before["label"], before["reason"]
    annotation.notes = before.get("notes", "")
    annotation.save()


# --- agreement: pure functions ------------------------------------------------------------


def cohens_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters over the same items, in the same order.

    None when chance agreement is total (both raters used one and the same category for
    every item): kappa is 0/0 there.
    """
    if len(first) != len(second):
        raise ValueError(f"the raters labelled {len(first)} and {len(second)} items")
    if not first:
        return None
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    counts_a, counts_b = Counter(first), Counter(second)
    expected = sum(counts_a[c] * counts_b[c] for c in counts_a) / (n * n)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1 - expected)


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from an items × categories table of how many raters chose each.

    Every item must have the same number of raters (at least two). None when chance
    agreement is total (every rating fell in one category).
    """
    if not table:
        return None
    raters = sum(table[0])
    if raters < 2 or any(sum(row) != raters for row in table):
        raise ValueError("every item needs the same number of raters, at least two")
    items, total = len(table), len(table) * raters
    shares = [sum(row[j] for row in table) / total for j in range(len(table[0]))]
    per_item = [(sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in table]
    observed = sum(per_item) / items
    expected = sum(p * p for p in shares)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1 - expected)


# --- reads ----------------------------------------------------------------------------------


def annotation_agreement(*, filters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Cohen's kappa per pair of annotators and Fleiss' kappa over fully-overlapped items.

    Fleiss needs a constant number of raters, so it uses the episodes labelled by the most
    common number (≥ 2) of annotators. One query.
    """
    episodes = episodes_matching(filters=episode_filters_clean(filters or {}))
    rows = Annotation.objects.filter(
        episode_id__in=episodes.filter(annotation_count__gte=2).values("pk")
    ).values_list("episode_id", "annotator_id", "label")
    by_episode: dict[int, dict[int, str]] = defaultdict(dict)
    for episode_id, annotator_id, label in rows:
        by_episode[episode_id][annotator_id] = label
    return {"cohen": _pairwise(by_episode), "fleiss": _fleiss(by_episode)}


def _pairwise(by_episode: dict[int, dict[int, str]]) -> list[dict[str, Any]]:
    annotators = sorted({a for labels in by_episode.values() for a in labels})
    out = []
    for a, b in itertools.combinations(annotators, 2):
        shared = [labels for labels in by_episode.values() if a in labels and b in labels]
        if shared:
            kappa = cohens_kappa([s[a] for s in shared], [s[b] for s in shared])
            out.append({"annotators": [a, b], "episodes": len(shared), "kappa": kappa})
    return out


def _fleiss(by_episode: dict[int, dict[int, str]]) -> dict[str, Any]:
    sizes = Counter(len(labels) for labels in by_episode.values())
    if not sizes:
        return {"raters": 0, "episodes": 0, "kappa": None}
    raters = max(sizes, key=lambda size: (sizes[size], size))
    categories = list(AnnotationLabel.values)
    table = [
        [list(labels.values()).count(c) for c in categories]
        for labels in by_episode.values()
        if len(labels) == raters
    ]
    return {"raters": raters, "episodes": len(table), "kappa": fleiss_kappa(table)}


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
