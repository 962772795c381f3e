"""The SFT export pages: list, create (with the count of what it would export, re-counted
as the form changes), one export and its progress fragment."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from harness_app.ids import as_id
from harness_app.roles import browse_required, researcher_required
from training import selectors
from training.forms import SFTExportCreateForm
from training.models import SFTExport
from training.services import exports
from training.views.jobs import request_user, row_or_404
from trajectories.episode_filters import episodes_matching


def _export_or_404(pk: int) -> SFTExport:
    return row_or_404(selectors.sft_export_get, pk, what="SFT export")


@browse_required
@require_GET
def sft_export_list(request: HttpRequest) -> HttpResponse:
    """Every export; ?episode=<pk> keeps those holding that episode."""
    episode = as_id(request.GET.get("episode"))
    page = selectors.sft_export_list_page(page=request.GET.get("page"), episode=episode)
    return render(request, "training/sft_export_list.html", {"page": page, "episode": episode})


@researcher_required
def sft_export_create(request: HttpRequest) -> HttpResponse:
    """The options of POST /api/exports/; ?episodes=1,2,3 pre-fills the episode ids. An
    export of no episode is refused on the form, naming the filter that emptied it."""
    initial = {"ids": request.GET.get("episodes", "")}
    form = SFTExportCreateForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            export = exports.sft_export_create(
                created_by=request_user(request),
                filters=data["filters"],
                fmt=data["fmt"],
                reconstruction=data["reconstruction"],
            )
        except exports.ExportError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"SFT export {export.pk} queued.")
            return redirect("sft_export_detail", pk=export.pk)
    return render(request, "training/sft_export_create.html", {"form": form})


@researcher_required
@require_GET
def sft_export_preview(request: HttpRequest) -> HttpResponse:
    """The create form's count: the episodes its filters would export, clause by clause.
    htmx asks again whenever the form changes."""
    form = SFTExportCreateForm(request.GET)
    context: dict[str, Any] = {"form": form}
    if form.is_valid():
        try:
            context["preview"] = exports.sft_export_preview(filters=form.cleaned_data["filters"])
        except exports.ExportError as exc:
            context["problem"] = str(exc)
    else:
        name, errors = next(iter(form.errors.items()))
        field = form.fields.get(name)
        context["problem"] = f"{field.label}: {errors[0]}" if field else errors[0]
    return render(request, "training/sft_export_preview.html", context)


@browse_required
@require_GET
def sft_export_detail(request: HttpRequest, pk: int) -> HttpResponse:
    context = _export_live_context(_export_or_404(pk))
    return render(request, "training/sft_export_detail.html", context)


@browse_required
@require_GET
def sft_export_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """What changes on an export's page while it runs. htmx polls it while the export is
    queued or running; a finished export's answer carries no trigger, so polling stops."""
    context = _export_live_context(_export_or_404(pk))
    return render(request, "training/sft_export_live.html", context)


def _export_live_context(export: SFTExport) -> dict[str, Any]:
    context: dict[str, Any] = {"export": export}
    if export.is_finished:
        context["rl_launch"] = urlencode(selectors.export_launch_defaults(export))
    else:  # what the worker has to write, counted again while it runs
        context["matching"] = episodes_matching(filters=export.filters).count()
    return context
