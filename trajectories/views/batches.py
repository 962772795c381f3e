"""The batch pages: launch a rollout batch, follow its progress live, cancel it, re-send
one whose episodes could not be sent (the task broker was down)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app import jobs
from harness_app.roles import browse_required, researcher_required
from trajectories.forms import BatchLaunchForm
from trajectories.models import RolloutBatch
from trajectories.selectors import batches
from trajectories.services import resends, rollouts


def _batch_or_404(pk: int) -> RolloutBatch:
    batch = batches.batch_get(pk=pk)
    if batch is None:
        raise Http404("no such batch")
    return batch


@researcher_required
def batch_launch(request: HttpRequest) -> HttpResponse:
    # ?benchmark=<id> (the benchmark page's "Launch a batch") pre-selects that benchmark.
    form = BatchLaunchForm(request.POST or None, initial=_launch_initial(request))
    if request.method == "POST" and form.is_valid():
        batch = _launch(request, form)
        reason = jobs.send_error(batch) if batch is not None else ""
        if batch is not None and reason:
            # The batch is kept: its page re-sends it once the broker is back.
            form.add_error(None, f"batch {batch.pk} was created but not sent: {reason}")
            context = {"form": form, "not_queued_batch": batch}
            return render(request, "trajectories/batch_launch.html", context)
        if batch is not None:
            messages.success(request, f"Batch {batch.pk} queued: {batch.episodes_total} episodes.")
            return redirect("batch_detail", pk=batch.pk)
    return render(request, "trajectories/batch_launch.html", {"form": form})


def _launch_initial(request: HttpRequest) -> dict[str, str]:
    return {name: request.GET[name] for name in ("benchmark", "policy") if request.GET.get(name)}


def _launch(request: HttpRequest, form: BatchLaunchForm) -> RolloutBatch | None:
    data = form.cleaned_data
    user = request.user if isinstance(request.user, AbstractBaseUser) else None
    try:
        return rollouts.batch_create(
            benchmark=data["benchmark"],
            policy=data["policy"],
            created_by=user,
            samples_per_query=data["samples_per_query"],
            max_turns=data["max_turns"],
            termination_policy=data["termination_policy"],
            ablate=data["ablate"],
            query_limit=data["query_limit"],
            teacher_rule=data["teacher_rule"],
            capture_tokens=not data["without_tokens"],
        )
    except rollouts.BatchParameterError as exc:
        # A parameter the form does not offer (reward weights) is shown above the form.
        field = "without_tokens" if exc.field == "capture_tokens" else exc.field
        form.add_error(field if field in form.fields else None, str(exc))
        return None


@browse_required
@require_GET
def batch_detail(request: HttpRequest, pk: int) -> HttpResponse:
    batch = _batch_or_404(pk)
    return render(request, "trajectories/batch_detail.html", _live_context(request, batch))


@browse_required
@require_GET
def batch_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """Everything on the batch page that changes as episodes finish: progress and pace, the
    metrics, the groups (the page asked for) and the cancel button. htmx polls it while the
    batch is active; the answer for a finished batch carries no trigger, so that last
    refresh shows the final figures and polling stops."""
    batch = _batch_or_404(pk)
    return render(request, "trajectories/batch_live.html", _live_context(request, batch))


def _live_context(request: HttpRequest, batch: RolloutBatch) -> dict[str, Any]:
    return {
        "batch": batch,
        "live": batch.status in batches.ACTIVE_BATCH,
        "metrics": batches.batch_metrics(batch=batch),
        "groups": batches.batch_groups_page(batch=batch, page=request.GET.get("page")),
        "teacher": batches.teacher_summary(batch=batch),
        "not_queued": jobs.send_error(batch, reread=False),
    }


@researcher_required
@require_POST
def batch_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    batch = _batch_or_404(pk)
    cancelled = rollouts.batch_cancel(batch=batch)
    messages.success(
        request, f"Batch {batch.pk} cancelled; {cancelled} pending episodes will not run."
    )
    return redirect("batch_detail", pk=batch.pk)


@researcher_required
@require_POST
def batch_resend(request: HttpRequest, pk: int) -> HttpResponse:
    batch = _batch_or_404(pk)
    try:
        pending = resends.batch_resend(batch=batch)
    except resends.BatchNotResendable as exc:
        messages.error(request, str(exc))
        return redirect("batch_detail", pk=batch.pk)
    reason = jobs.send_error(batch)
    if reason:
        messages.error(request, f"Batch {batch.pk} was not sent again: {reason}")
    else:
        messages.success(request, f"Batch {batch.pk} re-sent: {pending} pending episodes queued.")
    return redirect("batch_detail", pk=batch.pk)
