"""The RL job pages: the list, the launch form (researchers), a job with its steps,
versions and training curves, its progress fragment (polled by htmx), and cancel."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app.roles import browse_required, researcher_required
from training import selectors
from training.forms import RLJobLaunchForm
from training.models import RLJob
from training.services import rl_jobs
from training.views.jobs import launch_page, list_page, row_or_404


def _job_or_404(pk: int) -> RLJob:
    return row_or_404(selectors.rl_job_get, pk, what="RL job")


@browse_required
@require_GET
def rl_job_list(request: HttpRequest) -> HttpResponse:
    return list_page(request, selectors.rl_job_list_page, "training/rl_job_list.html")


@researcher_required
def rl_job_launch(request: HttpRequest) -> HttpResponse:
    """The launch form; ?base_policy=<pk> and ?benchmark=<pk> preselect those (an export's
    "Launch RL from this export's policy")."""
    initial = {k: request.GET[k] for k in ("base_policy", "benchmark") if request.GET.get(k)}
    return launch_page(
        request,
        RLJobLaunchForm(request.POST or None, initial=initial),
        create=_create,
        queued=lambda job: f"RL job {job.pk} queued: {job.steps} steps.",
        detail="rl_job_detail",
        template="training/rl_job_launch.html",
    )


def _create(form: RLJobLaunchForm, user: AbstractBaseUser | None) -> RLJob:
    data = form.cleaned_data
    return rl_jobs.rl_job_create(
        benchmark=data["benchmark"],
        base_policy=data["base_policy"],
        base_model_dir=data["base_model_dir"],
        job_settings=rl_jobs.job_settings_from(data, given=form.changed_data),
        name=data["name"],
        created_by=user,
        warm_start=data.get("warm_start"),
    )


@browse_required
@require_GET
def rl_job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job_or_404(pk)
    steps = selectors.rl_job_steps(job=job)
    overlaps, idle = selectors.job_step_timing(steps)
    context = {
        "job": job,
        "steps": [(step, overlaps.get(step.index)) for step in steps],
        "idle": idle,
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
