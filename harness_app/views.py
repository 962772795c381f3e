from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from harness_app import selectors
from harness_app.forms import BenchmarkUploadForm, PolicyConfigForm
from harness_app.importers.records import ImportRejected
from harness_app.models import ImportJob, PolicyConfig
from harness_app.roles import browse_required, researcher_required
from harness_app.services.import_jobs import import_job_create

# --- benchmarks -------------------------------------------------------------------------


@browse_required
def benchmark_list(request: HttpRequest) -> HttpResponse:
    context = {
        "page": selectors.benchmark_list_page(page=request.GET.get("page")),
        "jobs": [
            (job, selectors.import_job_progress(job)) for job in selectors.import_jobs_recent()
        ],
    }
    return render(request, "harness_app/benchmark_list.html", context)


@browse_required
def benchmark_detail(request: HttpRequest, pk: int) -> HttpResponse:
    benchmark = selectors.benchmark_get(pk=pk)
    if benchmark is None:
        raise Http404("no such benchmark")
    context = {
        "benchmark": benchmark,
        "corpus": benchmark.corpus,
        "queries": selectors.benchmark_queries_page(
            benchmark=benchmark, page=request.GET.get("page")
        ),
        "documents": selectors.corpus_sample(corpus_id=benchmark.corpus_id),
    }
    return render(request, "harness_app/benchmark_detail.html", context)


@researcher_required
def benchmark_upload(request: HttpRequest) -> HttpResponse:
    form = BenchmarkUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = import_job_create(
                upload=data["file"],
                name=data["name"],
                split=data["split"],
                replace=data["replace"],
                fmt=data["format"],
                created_by=request.user if isinstance(request.user, User) else None,
            )
        except ImportRejected as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Upload received; importing {job.name!r} in the background.")
            return redirect("benchmark_list")
    return render(request, "harness_app/benchmark_upload.html", {"form": form})


@browse_required
@require_GET
def import_job_row(request: HttpRequest, pk: int) -> HttpResponse:
    """One import's table row; htmx polls it every second while the import is active."""
    job = get_object_or_404(ImportJob.objects.select_related("benchmark"), pk=pk)
    context = {"job": job, "progress": selectors.import_job_progress(job)}
    return render(request, "harness_app/benchmark_import_row.html", context)


# --- policy configs ---------------------------------------------------------------------


@researcher_required
@require_GET
def policy_list(request: HttpRequest) -> HttpResponse:
    policies = PolicyConfig.objects.order_by("name")
    return render(request, "harness_app/policy_list.html", {"policies": policies})


@researcher_required
def policy_create(request: HttpRequest) -> HttpResponse:
    """The same checks as POST /api/policies/ (the form runs the API's serializer)."""
    form = PolicyConfigForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        policy = form.save()
        messages.success(request, f"Policy {policy.name!r} created; launch a batch with it below.")
        return redirect(f"{reverse('policy_list')}#policy-{policy.pk}")
    return render(request, "harness_app/policy_form.html", {"form": form})
