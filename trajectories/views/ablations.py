"""The ablation-matrix pages: launch one, follow its progress, read its table and plot, and
download its CSV (the reference's columns) and JSON (the `ablate --json` document)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from harness_app import jobs
from harness_app.roles import browse_required, researcher_required
from trajectories.forms import AblationMatrixLaunchForm
from trajectories.models import AblationMatrix, MatrixStatus
from trajectories.selectors import ablations as selectors
from trajectories.services import ablations


def _matrix_or_404(pk: int) -> AblationMatrix:
    matrix = selectors.ablation_matrix_get(pk=pk)
    if matrix is None:
        raise Http404("no such ablation matrix")
    return matrix


def _done_or_404(pk: int) -> AblationMatrix:
    matrix = _matrix_or_404(pk)
    if matrix.status != MatrixStatus.DONE:
        raise Http404(f"ablation matrix {pk} has no result yet ({matrix.status})")
    return matrix


@researcher_required
def ablation_launch(request: HttpRequest) -> HttpResponse:
    form = AblationMatrixLaunchForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        user = request.user if isinstance(request.user, AbstractBaseUser) else None
        try:
            matrix = ablations.ablation_matrix_create(created_by=user, **data)
        except ablations.MatrixParameterError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        else:
            reason = jobs.send_error(matrix)
            if not reason:
                messages.success(
                    request,
                    f"Ablation matrix {matrix.pk} queued: {matrix.episodes_total} episodes.",
                )
                return redirect("ablation_detail", pk=matrix.pk)
            form.add_error(None, f"ablation matrix {matrix.pk} could not start: {reason}")
    return render(request, "trajectories/ablation_launch.html", {"form": form})


@browse_required
@require_GET
def ablation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    matrix = _matrix_or_404(pk)
    context = {
        "matrix": matrix,
        "table": selectors.matrix_table(matrix),
        "chart": selectors.matrix_chart(matrix),
    }
    return render(request, "trajectories/ablation_detail.html", context)


@browse_required
@require_GET
def ablation_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """The matrix's progress line; htmx polls it while the matrix is queued or running, and
    reloads the page once it has finished, so the table and plot appear."""
    matrix = _matrix_or_404(pk)
    response = render(request, "trajectories/ablation_progress.html", {"matrix": matrix})
    if matrix.is_finished and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"
    return response


@browse_required
@require_GET
def ablation_csv(request: HttpRequest, pk: int) -> HttpResponse:
    matrix = _done_or_404(pk)
    response = HttpResponse(selectors.matrix_csv_text(matrix), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="ablation-matrix-{pk}.csv"'
    return response


@browse_required
@require_GET
def ablation_json(request: HttpRequest, pk: int) -> HttpResponse:
    matrix = _done_or_404(pk)
    response = HttpResponse(json.dumps(matrix.result, indent=2), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="ablation-matrix-{pk}.json"'
    return response
