"""The evaluation-run pages: the list, the launch form, and one run's page with its live
progress, mean ± std table, paired comparison and transfer table (plot and CSV); cancel."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app import jobs
from harness_app.ids import as_id, id_problem
from harness_app.roles import researcher_required
from trajectories.forms import EvaluationRunLaunchForm
from trajectories.models import EvaluationRun
from trajectories.selectors import evaluations as selectors
from trajectories.services import evaluations


def _evaluation_or_404(pk: int) -> EvaluationRun:
    evaluation = selectors.evaluation_get(pk=pk)
    if evaluation is None:
        raise Http404("no such evaluation run")
    return evaluation


def _metric(request: HttpRequest, name: str = "metric") -> str:
    metric = request.GET.get(name) or "curated_recall"
    return metric if metric in selectors.METRICS else "curated_recall"


@researcher_required
@require_GET
def evaluation_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.evaluations_for_list(), 25).get_page(request.GET.get("page"))
    return render(request, "trajectories/evaluation_list.html", {"page": page})


@researcher_required
def evaluation_launch(request: HttpRequest) -> HttpResponse:
    form = EvaluationRunLaunchForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = request.user if isinstance(request.user, AbstractBaseUser) else None
        try:
            evaluation = evaluations.evaluation_create(created_by=user, **form.cleaned_data)
        except evaluations.EvaluationParameterError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        else:
            first = evaluation.batches.order_by("pk").first()
            reason = jobs.send_error(first) if first is not None else ""
            if not reason:
                batches = evaluation.batches.count()
                messages.success(
                    request, f"Evaluation run {evaluation.pk} queued: {batches} batches."
                )
                return redirect("evaluation_detail", pk=evaluation.pk)
            form.add_error(None, f"evaluation run {evaluation.pk} could not start: {reason}")
    return render(request, "trajectories/evaluation_launch.html", {"form": form})


@researcher_required
@require_GET
def evaluation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    evaluation = _evaluation_or_404(pk)
    transfer = selectors.evaluation_transfer(evaluation=evaluation, metric=_metric(request))
    context = {
        "evaluation": evaluation,
        "progress": selectors.evaluation_progress(evaluation=evaluation),
        "table": selectors.evaluation_table(evaluation=evaluation),
        "configs": selectors.evaluation_configs(evaluation=evaluation),
        "benchmarks": evaluation.benchmarks.order_by("name"),
        "metrics": [(m, selectors.METRIC_LABELS[m]) for m in selectors.METRICS],
        "metric": transfer["metric"],
        "transfer": transfer,
        "chart": selectors.transfer_chart(transfer),
        "compare": _comparison(request, evaluation),
    }
    return render(request, "trajectories/evaluation_detail.html", context)


def _comparison(request: HttpRequest, evaluation: EvaluationRun) -> dict[str, Any] | None:
    """The comparison the picker asked for (?a=&b=), or its error; None before it asks."""
    a, b = request.GET.get("a"), request.GET.get("b")
    if not a or not b:
        return None
    raw = request.GET.get("benchmark") or None
    benchmark = as_id(raw) if raw else None
    if raw and benchmark is None:
        return {"error": f"benchmark: {id_problem(raw)}"}
    try:
        return selectors.evaluation_compare(
            evaluation=evaluation,
            a=a,
            b=b,
            metric=_metric(request, "compare_metric"),
            benchmark=benchmark,
        )
    except selectors.EvaluationQueryError as exc:
        return {"error": str(exc)}


@researcher_required
@require_GET
def evaluation_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """The run's progress line; htmx polls it while the run is going, and reloads the page
    once it has finished, so the tables show the final figures."""
    evaluation = _evaluation_or_404(pk)
    context = {
        "evaluation": evaluation,
        "progress": selectors.evaluation_progress(evaluation=evaluation),
    }
    response = render(request, "trajectories/evaluation_progress.html", context)
    if evaluation.is_finished and request.headers.get("HX-Request"):
        response["HX-Refresh"] = "true"
    return response


@researcher_required
@require_GET
def evaluation_transfer_csv(request: HttpRequest, pk: int) -> HttpResponse:
    evaluation = _evaluation_or_404(pk)
    transfer = selectors.evaluation_transfer(evaluation=evaluation, metric=_metric(request))
    response = HttpResponse(selectors.transfer_csv(transfer), content_type="text/csv")
    filename = f"evaluation-{pk}-transfer-{transfer['metric']}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@researcher_required
@require_POST
def evaluation_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    evaluation = _evaluation_or_404(pk)
    cancelled = evaluations.evaluation_cancel(evaluation=evaluation)
    messages.success(
        request, f"Evaluation run {pk} cancelled; {cancelled} pending episodes will not run."
    )
    return redirect("evaluation_detail", pk=pk)
