"""Annotations: the queue that hands episodes to annotators, labels, skip, undo, bulk actions.

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

Identical samples (selectors/identical.py: a deterministic policy's repeats) are one item on
the queue page: `annotation_next(with_identical=True)` locks the item's identical samples to
the annotator with it, and `annotation_label(with_identical=True)` gives them the same label,
each with its own Annotation and an event that names the episode the label was given on
(`identical_to`; that episode's event lists them under `identical`). Skip and undo act on
the whole item. The API labels one episode at a time. Agreement is read in
selectors/agreement.py; the queue's pool, an item's identical samples (`label_family`) and
reward-hacking candidates in selectors/annotation.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, QuerySet, Subquery
from django.utils import timezone

from trajectories.episode_filters import episode_filters_clean
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
)
from trajectories.selectors.annotation import (
    UNDO_WINDOW,
    annotation_undoable,
    bulk_targets,
    default_overlap,
    label_family,
    live_locks,
    queue_pool,
)
from trajectories.selectors.identical import identical_samples

MAX_OVERLAP = 20
CANDIDATES_PER_ROUND = 20


class AnnotationError(ValueError):
    """An annotation request that cannot be carried out; the message says why and `field`
    names the input at fault ("" when it is the request as a whole)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


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
    *,
    annotator: Any,
    episode: Episode,
    label: str,
    reason: str = "",
    notes: str = "",
    with_identical: bool = False,
) -> Annotation:
    """Record (or change) this annotator's label on the episode and release their lock.

    With `with_identical` (the queue page) the label also goes to the episodes that
    `label_family` names, so one decision labels every identical sample of the item.
    """
    label_check(label=label, reason=reason)
    # The row lock serialises concurrent labels of one episode, so the status is right.
    episode = Episode.objects.select_for_update().get(pk=episode.pk)
    if episode.status not in FINISHED_EPISODE:
        raise AnnotationError(f"episode {episode.pk} is {episode.status}; label it once it ends")
    # Another annotator holds it from the queue: labelling it now (as the API could) would
    # break the queue's promise that one annotator works an episode at a time. Who holds
    # it is not said: annotators label blind.
    now = timezone.now()
    held = live_locks(now).filter(episode=episode).exclude(annotator=annotator)
    until = held.values_list("expires_at", flat=True).first()
    if until is not None:
        raise AnnotationError(
            f"episode {episode.pk} is being labelled by another annotator until "
            f"{until:%H:%M:%S} UTC; take your next episode from the queue",
            field="episode",
        )
    family = label_family(annotator=annotator, episode=episode, now=now) if with_identical else []
    list(Episode.objects.select_for_update().filter(pk__in=family))  # row locks, as above
    for pk in family:
        _label_write(annotator, pk, (label, reason, notes), {"identical_to": episode.pk})
    # Written last, so that it is the decision an undo finds.
    marks = {"identical": family} if family else {}
    annotation = _label_write(annotator, episode.pk, (label, reason, notes), marks)
    _status_refresh([episode.pk, *family])
    return annotation


def _label_write(
    annotator: Any, episode_id: int, judgement: tuple[str, str, str], marks: dict[str, Any]
) -> Annotation:
    """One episode's label, its lock released and its event (with `marks`) written."""
    existing = Annotation.objects.filter(episode_id=episode_id, annotator=annotator).first()
    before = _snapshot(existing)
    annotation = existing or Annotation(episode_id=episode_id, annotator=annotator)
    annotation.label, annotation.reason, annotation.notes = judgement
    annotation.save()
    AnnotationLock.objects.filter(episode_id=episode_id, annotator=annotator).delete()
    AnnotationEvent.objects.create(
        actor=annotator,
        kind=AnnotationEventKind.LABEL,
        episode_id=episode_id,
        before=before,
        after={**(_snapshot(annotation) or {}), **marks},
    )
    return annotation


# --- the queue ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Assignment:
    episode: Episode
    expires_at: datetime


def _held(annotator: Any, now: datetime) -> Assignment | None:
    """The annotator's live lock on an episode they have not labelled yet, if any."""
    # The first lock taken: the queue page's item, whose identical samples came with it.
    lock = (
        live_locks(now)
        .filter(annotator=annotator)
        .exclude(episode__annotations__annotator=annotator)
        .select_related("episode")
        .order_by("pk")
        .first()
    )
    return Assignment(episode=lock.episode, expires_at=lock.expires_at) if lock else None


def _open_to(
    annotator: Any, filters: Mapping[str, Any], overlap: int, now: datetime
) -> QuerySet[Episode]:
    """The episodes the queue may hand this annotator now: free, short of labels, not theirs."""
    taken = live_locks(now).filter(episode=OuterRef("pk"))
    mine = Annotation.objects.filter(episode=OuterRef("pk"), annotator=annotator)
    return (
        queue_pool(filters=filters)
        .filter(annotation_count__lt=overlap)
        .filter(~Exists(taken), ~Exists(mine))
    )


def _candidate_ids(
    annotator: Any, filters: Mapping[str, Any], overlap: int, now: datetime
) -> list[int]:
    skips = AnnotationEvent.objects.filter(
        episode=OuterRef("pk"), actor=annotator, kind=AnnotationEventKind.SKIP
    )
    episodes = (
        _open_to(annotator, filters, overlap, now)
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
    *,
    annotator: Any,
    filters: Mapping[str, Any] | None = None,
    overlap: int | None = None,
    with_identical: bool = False,
) -> Assignment | None:
    """The next episode for this annotator, locked to them; None when the queue is empty.

    An annotator holding an unlabelled episode gets it back, so reloading the page does not
    skip it. Only completed episodes are queued. `filters` are raw episode filters. With
    `with_identical` (the queue page) the episode's identical samples that the queue could
    hand out are locked to the annotator with it: one item, labelled at once.
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
            if with_identical:
                open_ = _open_to(annotator, cleaned, overlap, now)
                _locks_take(identical_samples(episode=episode, among=open_), annotator, now)
            return Assignment(episode=episode, expires_at=lock.expires_at)
    return None


def _locks_take(episode_ids: Iterable[int], annotator: Any, now: datetime) -> None:
    for episode_id in episode_ids:
        if _lock_take(episode_id, annotator, now) is not None:
            AnnotationEvent.objects.create(
                actor=annotator, kind=AnnotationEventKind.LOCK, episode_id=episode_id
            )


@transaction.atomic
def annotation_skip(*, annotator: Any, episode: Episode) -> list[int]:
    """Put the episode back for now: the annotator's lock goes, and their queue hands it out
    again only after every episode they never skipped (skipped ones come back oldest skip
    first); its identical samples held with it go back too, and all are returned. Others
    are not affected. Refused on an episode the annotator does not hold."""
    lock = AnnotationLock.objects.filter(episode=episode, annotator=annotator).first()
    if lock is None:
        raise AnnotationError(f"episode {episode.pk} is not yours to skip: take it from the queue")
    item = [episode.pk, *label_family(annotator=annotator, episode=episode, now=timezone.now())]
    AnnotationLock.objects.filter(annotator=annotator, episode_id__in=item).delete()
    AnnotationEvent.objects.bulk_create(
        AnnotationEvent(actor=annotator, kind=AnnotationEventKind.SKIP, episode_id=pk)
        for pk in item
    )
    return item


@transaction.atomic
def annotation_undo(*, annotator: Any, episode: Episode) -> Annotation | None:
    """Take back the annotator's latest decision, on `episode`, with the identical samples
    it labelled: their labels before it come back (none: the item is theirs to label
    again, locked to them when free). Returns the restored label, or None. Only the latest,
    within UNDO_WINDOW, and only while the labels are still what that decision made them."""
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
    decision = [*_identical_decisions(annotator, event), (current, event)]
    for annotation, made in decision:  # the episode's own undo last, like its label
        _restore(annotation, made.before)
        AnnotationEvent.objects.create(
            actor=annotator,
            kind=AnnotationEventKind.UNDO,
            episode_id=made.episode_id,
            before=made.after,
            after=made.before,
        )
    _status_refresh(made.episode_id or 0 for _, made in decision)
    if event.before is not None:
        return current
    # Back in the queue: the item becomes this annotator's current one again.
    AnnotationLock.objects.filter(annotator=annotator).exclude(episode=episode).delete()
    _lock_take(episode.pk, annotator, now)
    _locks_take((m.episode_id or 0 for _, m in decision[:-1] if m.before is None), annotator, now)
    return None


def _identical_decisions(
    annotator: Any, event: AnnotationEvent
) -> list[tuple[Annotation, AnnotationEvent]]:
    """The identical samples' labels that `event`'s decision gave, with their events;
    refused when one has changed since."""
    ids = (event.after or {}).get("identical", [])
    latest: dict[int, AnnotationEvent] = {}
    rows = AnnotationEvent.objects.filter(
        actor=annotator, kind=AnnotationEventKind.LABEL, episode_id__in=ids
    )
    for row in rows.order_by("created_at", "pk"):
        latest[row.episode_id or 0] = row
    current = Annotation.objects.filter(annotator=annotator, episode_id__in=ids)
    labels = {a.episode_id: a for a in current}
    out = []
    for pk in ids:
        made, annotation = latest.get(pk), labels.get(pk)
        if (
            made is None
            or annotation is None
            or (made.after or {}).get("identical_to") != event.episode_id
            or annotation.updated_at > made.created_at
        ):
            raise AnnotationError(
                f"your label on episode {pk}, an identical sample of episode "
                f"{event.episode_id}, changed since; relabel it"
            )
        out.append((annotation, made))
    return out


# --- bulk actions -------------------------------------------------------------------------


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
    ids = list(bulk_targets(filters).values_list("pk", flat=True))
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
