"""The RL job pages: the list, the launch form (researchers), a job with its training
curves and steps, its progress fragment (polled by htmx) and cancel."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app.roles import browse_required, researcher_required
from training import selectors
from training.forms import RLJobLaunchForm
from training.models import RLJob
from training.services import rl_jobs


def _job_or_404(pk: int) -> RLJob:
    job = selectors.rl_job_get(pk=pk)
    if job is None:
        raise Http404(f"no RL job {pk}")
    return job


@browse_required
@require_GET
def rl_job_list(request: HttpRequest) -> HttpResponse:
    page = selectors.rl_job_list_page(page=request.GET.get("page"))
    return render(request, "training/rl_job_list.html", {"page": page})


@researcher_required
def rl_job_launch(request: HttpRequest) -> HttpResponse:
    form = RLJobLaunchForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        job = _launch(request, form)
        if job is not None:
            messages.success(request, f"RL job {job.pk} queued: {job.steps} steps.")
            return redirect("rl_job_detail", pk=job.pk)
    return render(request, "training/rl_job_launch.html", {"form": form})


def _launch(request: HttpRequest, form: RLJobLaunchForm) -> RLJob | None:
    data = form.cleaned_data
    user = request.user if isinstance(request.user, AbstractBaseUser) else None
    try:
        return rl_jobs.rl_job_create(
            benchmark=data["benchmark"],
            base_policy=data["base_policy"],
            base_model_dir=data["base_model_dir"],
            job_settings=rl_jobs.job_settings_from(data, given=form.changed_data),
            name=data["name"],
            created_by=user,
        )
    except rl_jobs.RLJobError as exc:
        form.add_error(exc.field, str(exc))
        return None


@browse_required
@require_GET
def rl_job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job_or_404(pk)
    steps = selectors.rl_job_steps(job=job)
    context = {
        "job": job,
        "steps": steps,
        "versions": selectors.rl_job_versions(job=job),
        "curves": selectors.rl_job_curves(steps),
    }
    return render(request, "training/rl_job_detail.html", context)


@browse_required
@require_GET
def rl_job_progress(request: HttpRequest, pk: int) -> HttpResponse:
    return render(request, "training/rl_job_progress.html", {"job": _job_or_404(pk)})


@researcher_required
@require_POST
def rl_job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job_or_404(pk)
    if rl_jobs.rl_job_cancel(job=job):
        messages.success(request, f"RL job {job.pk} cancelled; its running batch was stopped.")
    else:
        messages.info(request, f"RL job {job.pk} had already finished.")
    return redirect("rl_job_detail", pk=job.pk)
