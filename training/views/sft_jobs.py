"""The SFT job pages: the list, the launch form (researchers), a job with its loss curves
and lineage, its progress fragment (polled by htmx), and cancel, resume and serve again."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app import jobs
from harness_app.roles import browse_required, researcher_required
from training import selectors
from training.forms import SFTJobLaunchForm
from training.models import JobStatus, SFTJob
from training.rl.publish import PublishError
from training.services import sft_jobs
from training.views.jobs import launch_page, list_page, row_or_404


def _job_or_404(pk: int) -> SFTJob:
    return row_or_404(selectors.sft_job_get, pk, what="SFT job")


@browse_required
@require_GET
def sft_job_list(request: HttpRequest) -> HttpResponse:
    return list_page(request, selectors.sft_job_list_page, "training/sft_job_list.html")


@researcher_required
def sft_job_launch(request: HttpRequest) -> HttpResponse:
    """The launch form; ?export=<pk> preselects an export."""
    return launch_page(
        request,
        SFTJobLaunchForm(request.POST or None, initial={"export": request.GET.get("export")}),
        create=_create,
        queued=lambda job: f"SFT job {job.pk} queued on export {job.export_id}.",
        detail="sft_job_detail",
        template="training/sft_job_launch.html",
    )


def _create(form: SFTJobLaunchForm, user: AbstractBaseUser | None) -> SFTJob:
    data = form.cleaned_data
    return sft_jobs.sft_job_create(
        export=data["export"],
        base_policy=data["base_policy"],
        base_model_dir=data["base_model_dir"],
        job_settings=sft_jobs.sft_settings_from(data),
        name=data["name"],
        created_by=user,
    )


@browse_required
@require_GET
def sft_job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job_or_404(pk)
    context = {
        "job": job,
        "curves": selectors.sft_job_curves(job),
        "teacher_batches": selectors.sft_job_teacher_batches(job),
        "rl_jobs": selectors.sft_job_rl_jobs(job),
    }
    return render(request, "training/sft_job_detail.html", context)


@browse_required
@require_GET
def sft_job_progress(request: HttpRequest, pk: int) -> HttpResponse:
    return render(request, "training/sft_job_progress.html", {"job": _job_or_404(pk)})


@researcher_required
@require_POST
def sft_job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job_or_404(pk)
    if not sft_jobs.sft_job_cancel(job=job):
        messages.info(request, f"SFT job {job.pk} had already finished.")
    elif job.status == JobStatus.QUEUED:
        messages.success(request, f"SFT job {job.pk} cancelled.")
    else:
        messages.success(request, f"SFT job {job.pk} stops after its current step.")
    return redirect("sft_job_detail", pk=job.pk)


@researcher_required
@require_POST
def sft_job_resume(request: HttpRequest, pk: int) -> HttpResponse:
    job = _job_or_404(pk)
    try:
        sft_jobs.sft_job_resume(job=job)
    except sft_jobs.SFTJobError as exc:
        messages.error(request, str(exc))
    else:
        reason = jobs.send_error(job)
        if reason:
            messages.error(request, f"SFT job {job.pk} could not start: {reason}")
        else:
            messages.success(request, f"SFT job {job.pk} queued again from its checkpoint.")
    return redirect("sft_job_detail", pk=job.pk)


@researcher_required
@require_POST
def sft_job_serve(request: HttpRequest, pk: int) -> HttpResponse:
    """Serve the adapter: again after a vLLM restart, or after its publish failed."""
    job = _job_or_404(pk)
    try:
        loaded = sft_jobs.sft_job_publish(job=job)
    except (sft_jobs.SFTJobError, PublishError) as exc:
        messages.error(request, str(exc))
    else:
        said = "is served" if loaded else "was already served"
        messages.success(request, f"SFT job {job.pk}'s adapter {said}.")
    return redirect("sft_job_detail", pk=job.pk)
