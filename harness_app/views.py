from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from harness_app import jobs, selectors
from harness_app.forms import BenchmarkUploadForm, PolicyConfigForm
from harness_app.importers.records import ImportRejected
from harness_app.models import ImportJob, PolicyConfig
from harness_app.roles import browse_required, researcher_required
from harness_app.services.import_jobs import import_job_create
from harness_app.services.policies import (
    PolicyConfigError,
    PolicySaved,
    policy_config_create,
    policy_config_delete,
    policy_config_update,
    policy_config_uses,
    policy_next_version_name,
)

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
            reason = jobs.send_error(job)
            if reason:
                form.add_error(None, f"the import of {job.name!r} could not start: {reason}")
                return render(request, "harness_app/benchmark_upload.html", {"form": form})
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
    """Every config with its version and what uses it: a fixed number of queries."""
    policies = list(PolicyConfig.objects.select_related("previous").order_by("name"))
    uses = policy_config_uses(policy_ids=[p.pk for p in policies])
    rows = [(policy, uses.get(policy.pk, [])) for policy in policies]
    return render(request, "harness_app/policy_list.html", {"rows": rows})


@researcher_required
def policy_create(request: HttpRequest) -> HttpResponse:
    """The same checks as POST /api/policies/ (the form runs the API's serializer)."""
    form = PolicyConfigForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        saved = _policy_save(request, form, None)
        if saved is not None:
            messages.success(
                request, f"Policy {saved.policy.name!r} created; launch a batch with it below."
            )
            return _to_row(saved.policy)
    return render(request, "harness_app/policy_form.html", {"form": form})


@researcher_required
def policy_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Edits in place while nothing uses the config; otherwise saves a new version."""
    policy = get_object_or_404(PolicyConfig, pk=pk)
    uses = policy_config_uses(policy_ids=[pk]).get(pk, [])
    form = PolicyConfigForm(request.POST or None, instance=policy)
    if request.method == "POST" and form.is_valid():
        saved = _policy_save(request, form, pk)
        if saved is not None:
            if saved.new_version:
                text = (
                    f"Policy {saved.policy.name!r} saved as version {saved.policy.version} of "
                    f"{saved.policy.previous}; its batches keep the earlier version."
                )
            else:
                text = f"Policy {saved.policy.name!r} saved."
            messages.success(request, text)
            return _to_row(saved.policy)
    context = {
        "form": form,
        "policy": PolicyConfig.objects.get(pk=pk),  # as stored, not as the form changed it
        "uses": uses,
        "next_name": policy_next_version_name(policy),
        "newer": policy.next_versions.order_by("pk").first(),
    }
    return render(request, "harness_app/policy_form.html", context)


def _policy_save(
    request: HttpRequest, form: PolicyConfigForm, pk: int | None
) -> PolicySaved | None:
    data = {name: form.cleaned_data[name] for name in PolicyConfig.EDITABLE_FIELDS}
    try:
        if pk is None:
            saved = policy_config_create(data=data)
        else:
            saved = policy_config_update(policy=PolicyConfig.objects.get(pk=pk), data=data)
    except PolicyConfigError as exc:
        form.add_error(exc.field, str(exc))
        return None
    for warning in saved.warnings:
        messages.warning(request, warning)
    return saved


def _to_row(policy: PolicyConfig) -> HttpResponse:
    return redirect(f"{reverse('policy_list')}#policy-{policy.pk}")


@researcher_required
def policy_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST deletes an unused config or says what uses it."""
    policy = get_object_or_404(PolicyConfig, pk=pk)
    if request.method == "POST":
        try:
            policy_config_delete(policy=policy)
        except PolicyConfigError as exc:
            messages.error(request, str(exc))
            return _to_row(policy)
        messages.success(request, f"Policy {policy.name!r} deleted.")
        return redirect("policy_list")
    uses = policy_config_uses(policy_ids=[pk]).get(pk, [])
    return render(request, "harness_app/policy_delete.html", {"policy": policy, "uses": uses})
