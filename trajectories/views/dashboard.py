"""The dashboard: ablation comparison across batches, and the live table of recent batches."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from harness_app.roles import browse_required
from trajectories.selectors.dashboard import batches_any_active, batches_recent, dashboard_data


@browse_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "trajectories/dashboard.html", dashboard_data())


@browse_required
@require_GET
def batches_progress(request: HttpRequest) -> HttpResponse:
    """The dashboard's batch table; htmx polls it while a batch is queued or running."""
    batches = batches_recent()
    context = {"batches": batches, "any_active": batches_any_active(batches)}
    return render(request, "trajectories/batch_table.html", context)
