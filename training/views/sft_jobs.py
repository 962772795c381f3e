"""The SFT job pages: the list, the launch form (researchers), a job with its loss curves
and lineage, its progress fragment (polled by htmx), and cancel, resume and serve again."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse

from harness_app import jobs
from harness_app.roles import researcher_required
from training import selectors
from training.forms import SFTJobLaunchForm
from training.models import JobStatus, SFTJob
from training.rl.publish import PublishError
from training.services import sft_jobs
from training.views.jobs import JobPages, Said


def _detail_context(job: SFTJob) -> dict[str, Any]:
    return {
        "job": job,
        "curves": selectors.sft_job_curves(job),
        "teacher_batches": selectors.sft_job_teacher_batches(job),
        "rl_jobs": selectors.sft_job_rl_jobs(job),
    }


PAGES = JobPages(
    "sft_job", "SFT job", selectors.sft_job_get, selectors.sft_job_list_page, _detail_context
)
sft_job_list, sft_job_detail, sft_job_progress = PAGES.read_views()


@researcher_required
def sft_job_launch(request: HttpRequest) -> HttpResponse:
    """The launch form; ?export=<pk> preselects an export."""
    return PAGES.launch_page(
        request,
        SFTJobLaunchForm(request.POST or None, initial={"export": request.GET.get("export")}),
        create=_create,
        queued=lambda job: f"SFT job {job.pk} queued on export {job.export_id}.",
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


def _cancel(job: SFTJob) -> Said:
    if not sft_jobs.sft_job_cancel(job=job):
        return messages.INFO, f"SFT job {job.pk} had already finished."
    if job.status == JobStatus.QUEUED:
        return messages.SUCCESS, f"SFT job {job.pk} cancelled."
    return messages.SUCCESS, f"SFT job {job.pk} stops after its current step."


def _resume(job: SFTJob) -> Said:
    try:
        sft_jobs.sft_job_resume(job=job)
    except sft_jobs.SFTJobError as exc:
        return messages.ERROR, str(exc)
    reason = jobs.send_error(job)
    if reason:
        return messages.ERROR, f"SFT job {job.pk} could not start: {reason}"
    return messages.SUCCESS, f"SFT job {job.pk} queued again from its checkpoint."


def _serve(job: SFTJob) -> Said:
    """Serve the adapter: again after a vLLM restart, or after its publish failed."""
    try:
        loaded = sft_jobs.sft_job_publish(job=job)
    except (sft_jobs.SFTJobError, PublishError) as exc:
        return messages.ERROR, str(exc)
    said = "is served" if loaded else "was already served"
    return messages.SUCCESS, f"SFT job {job.pk}'s adapter {said}."


sft_job_cancel = PAGES.action_view(_cancel)
sft_job_resume = PAGES.action_view(_resume)
sft_job_serve = PAGES.action_view(_serve)
