"""The annotator pages: the queue (with progress, skip and undo), review of one's own
labels, bulk actions (researchers), agreement, and reward-vs-judgement.

Thin adapters over services/annotations.py (every write) and selectors/annotation.py.
An annotator only ever sees their own label: the queue never shows the others'. The queue
page folds identical samples into one item: it takes and labels them `with_identical`.
"""

from __future__ import annotations

import math
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from harness_app.roles import Role, browse_required, researcher_required, user_has_role
from trajectories.forms import AnnotationLabelForm, EpisodeFilterForm
from trajectories.models import (
    AnnotationBulkAction,
    AnnotationLabel,
    AnnotationReason,
    AnnotationStatus,
    Episode,
)
from trajectories.selectors import annotation
from trajectories.selectors.annotation import (
    UNDO_WINDOW,
    annotation_bulk_preview,
    annotation_undoable,
    reward_hacking_candidates,
)
from trajectories.services.annotations import (
    AnnotationError,
    annotation_bulk_apply,
    annotation_bulk_undo,
    annotation_label,
    annotation_next,
    annotation_skip,
    annotation_undo,
    label_check,
)

LABEL_CHOICES = AnnotationLabel.choices
REASON_CHOICES = AnnotationReason.choices


def _queue_url(raw: dict[str, str]) -> str:
    query = urlencode(sorted(raw.items()))
    return reverse("annotate_queue") + (f"?{query}" if query else "")


def _filter_context(filters: annotation.QueueFilters, section: str) -> dict[str, object]:
    return {
        "section": section,
        "filters": filters,
        "filter_fields": annotation.filter_fields(filters.raw),
        # The episode list's form, unbound, for its benchmark and policy dropdowns.
        "choice_form": EpisodeFilterForm(initial=filters.raw, auto_id="f-%s"),
        "annotation_statuses": AnnotationStatus.choices,
        "filter_query": urlencode(sorted(filters.raw.items())),
    }


def _item(request: HttpRequest, episode_id: int) -> annotation.QueueItem:
    item = annotation.queue_item(episode_id=episode_id, annotator=request.user, now=timezone.now())
    if item is None:
        raise Http404("no such episode")
    return item


def _queue_context(
    request: HttpRequest, filters: annotation.QueueFilters, item: annotation.QueueItem | None
) -> dict[str, object]:
    """What the queue and review pages share: the filter, progress, the item and its form,
    and the latest decision while it may be undone."""
    context = _filter_context(filters, "queue")
    context["reason_last"] = str(len(REASON_CHOICES))
    if not filters.error:
        context["counts"] = annotation.queue_counts(annotator=request.user, filters=filters.cleaned)
    undoable = annotation_undoable(annotator=request.user, now=timezone.now())
    context["undoable"] = undoable
    context["undo_until"] = undoable.created_at + UNDO_WINDOW if undoable else None
    if item is not None:
        context["item"] = item
        mine = item.mine
        initial = {"reason": mine.reason, "notes": mine.notes} if mine else {}
        _with_form(context, AnnotationLabelForm(initial=initial))
    return context


def reason_options(current: str = "") -> list[tuple[str, str, str]]:
    """(key, value, text) of the queue page's reason radios: 0 for none, then a number key
    per suggested reason; a free-text reason given through the API keeps a key of its own,
    so relabelling does not drop it."""
    options = [("0", "", "No reason")]
    options += [(str(n), value, text) for n, (value, text) in enumerate(REASON_CHOICES, 1)]
    if current and current not in AnnotationReason.values:
        options.append((str(len(options)), current, current))
    return options


def _with_form(context: dict[str, object], form: AnnotationLabelForm) -> None:
    """The label form and what its keys will save: the reason keys, the reason chosen."""
    reason = form["reason"].value() or ""
    options = reason_options(reason)
    chosen = next((text for _, value, text in options if value and value == reason), "")
    context.update({"form": form, "reason_options": options, "reason_chosen": chosen})
    context["reason_last"] = options[-1][0]


@browse_required
@require_GET
def annotate_queue(request: HttpRequest) -> HttpResponse:
    """The next episode under the filter, locked to this annotator (or the empty state)."""
    filters = annotation.filters_from(request.GET)
    assignment = None
    if not filters.error:
        assignment = annotation_next(
            annotator=request.user, filters=filters.cleaned, with_identical=True
        )
    item = _item(request, assignment.episode.pk) if assignment else None
    context = _queue_context(request, filters, item)
    if assignment is not None:
        context["expires_at"] = assignment.expires_at
    previous = annotation.last_labelled(annotator=request.user)
    context["prev_url"] = reverse("annotate_review", args=[previous.episode_id]) if previous else ""
    context["next_url"] = ""
    return render(request, "trajectories/annotate_queue.html", context)


def _review_context(
    request: HttpRequest, filters: annotation.QueueFilters, item: annotation.QueueItem
) -> dict[str, object]:
    mine = item.mine
    assert mine is not None
    context = _queue_context(request, filters, item)
    before = annotation.last_labelled(annotator=request.user, before=mine)
    after = annotation.next_labelled(annotator=request.user, after=mine)
    context["prev_url"] = reverse("annotate_review", args=[before.episode_id]) if before else ""
    context["next_url"] = (
        reverse("annotate_review", args=[after.episode_id]) if after else _queue_url(filters.raw)
    )
    context["review"] = True
    return context


@browse_required
@require_GET
def annotate_review(request: HttpRequest, pk: int) -> HttpResponse:
    """An episode this annotator labelled, with their own label, to change it (`k`, `j`)."""
    filters = annotation.filters_from(request.GET)
    item = _item(request, pk)
    if item.mine is None:
        raise Http404("you have not labelled this episode")
    context = _review_context(request, filters, item)
    return render(request, "trajectories/annotate_queue.html", context)


def _episode_or_404(pk: int) -> Episode:
    episode = Episode.objects.filter(pk=pk).first()
    if episode is None:
        raise Http404("no such episode")
    return episode


@browse_required
@require_POST
def annotate_label(request: HttpRequest, pk: int) -> HttpResponse:
    """Record this annotator's label, then go on to the next item under the same filter.

    A refused decision (a rejection without a reason) shows the item again with the error
    on its field and what was typed kept, answering 400.
    """
    filters = annotation.filters_from(request.POST)
    episode = _episode_or_404(pk)
    if annotation.held_by_another(episode_id=pk, annotator=request.user, now=timezone.now()):
        messages.error(request, f"Episode {pk} is being labelled by someone else.")
        return redirect(_queue_url(filters.raw))
    form = AnnotationLabelForm(request.POST)
    if form.is_valid():
        try:
            annotation_label(
                annotator=request.user, episode=episode, with_identical=True, **form.cleaned_data
            )
        except AnnotationError as exc:
            if exc.field not in form.fields:
                messages.error(request, str(exc))
                return redirect(_queue_url(filters.raw))
            form.add_error(exc.field, str(exc))
        else:
            return redirect(_queue_url(filters.raw))
    item = _item(request, pk)
    if item.mine is not None:
        context = _review_context(request, filters, item)
    else:
        context = _queue_context(request, filters, item)
        context.update({"prev_url": "", "next_url": ""})
    _with_form(context, form)
    return render(request, "trajectories/annotate_queue.html", context, status=400)


@browse_required
@require_POST
def annotate_skip(request: HttpRequest, pk: int) -> HttpResponse:
    """Put the held episode back to the end of this annotator's queue; show the next one."""
    filters = annotation.filters_from(request.POST)
    try:
        skipped = annotation_skip(annotator=request.user, episode=_episode_or_404(pk))
    except AnnotationError as exc:
        messages.error(request, str(exc))
    else:
        copies = len(skipped) - 1
        item = f" and its {copies} identical sample{pluralize(copies)}" if copies else ""
        back = "they come" if copies else "it comes"
        messages.info(request, f"Episode {pk}{item} skipped: {back} back after the others.")
    return redirect(_queue_url(filters.raw))


@browse_required
@require_POST
def annotate_undo(request: HttpRequest, pk: int) -> HttpResponse:
    """Take back this annotator's latest decision (on episode `pk`), within the window."""
    filters = annotation.filters_from(request.POST)
    try:
        restored = annotation_undo(annotator=request.user, episode=_episode_or_404(pk))
    except AnnotationError as exc:
        messages.error(request, str(exc))
        return redirect(_queue_url(filters.raw))
    if restored is not None:
        messages.info(request, f"Episode {pk}: your earlier label is back.")
        return redirect(reverse("annotate_review", args=[pk]))
    messages.info(request, f"Episode {pk}: decision undone; label it again.")
    return redirect(_queue_url(filters.raw))


# --- bulk actions (researchers) ----------------------------------------------------------------


@researcher_required
@require_GET
def annotate_bulk(request: HttpRequest) -> HttpResponse:
    """The bulk form; with `preview`, how many episodes the action would label."""
    filters = annotation.filters_from(request.GET)
    label = request.GET.get("label", "")
    context = _filter_context(filters, "bulk")
    context.update(
        {
            "labels": LABEL_CHOICES,
            "reasons": REASON_CHOICES,
            "label": label,
            "reason": request.GET.get("reason", ""),
            "actions": annotation.bulk_actions_recent(),
        }
    )
    if "preview" in request.GET and not filters.error:
        if not filters.cleaned:
            context["preview_error"] = "Choose at least one filter: a bulk action needs one."
        elif label not in AnnotationLabel.values:
            context["preview_error"] = "Choose a label."
        else:
            try:  # refused before the count, not only when applied
                label_check(label=label, reason=request.GET.get("reason", ""))
            except AnnotationError as exc:
                context["preview_error"] = f"{str(exc).capitalize()}."
            else:
                context["preview"] = annotation_bulk_preview(filters=filters.cleaned)
    return render(request, "trajectories/annotate_bulk.html", context)


@researcher_required
@require_POST
def annotate_bulk_apply(request: HttpRequest) -> HttpResponse:
    filters = annotation.filters_from(request.POST)
    if filters.error or not filters.cleaned:
        messages.error(request, filters.error or "A bulk action needs at least one filter.")
        return redirect("annotate_bulk")
    try:
        action = annotation_bulk_apply(
            actor=request.user,
            filters=filters.cleaned,
            label=request.POST.get("label", ""),
            reason=request.POST.get("reason", "").strip(),
        )
    except AnnotationError as exc:
        messages.error(request, str(exc))
        return redirect("annotate_bulk")
    messages.success(
        request, f"Bulk action {action.pk}: {action.label} on {action.episodes} episodes."
    )
    return redirect("annotate_bulk")


@researcher_required
@require_POST
def annotate_bulk_undo(request: HttpRequest, pk: int) -> HttpResponse:
    action = AnnotationBulkAction.objects.filter(pk=pk).first()
    if action is None:
        raise Http404("no such bulk action")
    try:
        restored = annotation_bulk_undo(action=action, actor=request.user)
    except AnnotationError as exc:
        messages.error(request, str(exc))
        return redirect("annotate_bulk")
    messages.success(request, f"Bulk action {pk} undone: {restored} episodes restored.")
    return redirect("annotate_bulk")


# --- agreement, reward vs judgement --------------------------------------------------------------


# Researchers only: every pair's kappa names the annotators, and annotators label blind
# (they see neither the others' labels nor their counts before they decide).
@researcher_required
@require_GET
def annotate_agreement(request: HttpRequest) -> HttpResponse:
    filters = annotation.filters_from(request.GET)
    context = _filter_context(filters, "agreement")
    context["agreement"] = annotation.agreement_view(filters=filters.cleaned)
    return render(request, "trajectories/annotate_agreement.html", context)


@browse_required
@require_GET
def annotate_reward_hacking(request: HttpRequest) -> HttpResponse:
    raw = request.GET.get("min_reward", "").strip()
    error, min_reward = "", None
    if raw:
        try:
            min_reward = float(raw)
        except ValueError:
            min_reward = math.nan
        if not math.isfinite(min_reward):
            error, min_reward = f"min reward: expected a number, got {raw!r}", None
    episodes = list(reward_hacking_candidates(min_reward=min_reward))
    # Annotators label blind, so they see only their own reasons here.
    blind = not user_has_role(request.user, Role.RESEARCHER)
    rejections = annotation.rejections_by_episode(
        episode_ids=[e.pk for e in episodes], viewer=request.user, blind=blind
    )
    rows = [(e, rejections[e.pk]) for e in episodes]
    context = {
        "episodes": episodes,
        "rows": rows,
        "blind": blind,
        "min_reward": raw,
        "error": error,
        "section": "reward",
    }
    return render(request, "trajectories/annotate_reward_hacking.html", context)
