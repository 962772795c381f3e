"""The RL job pages: the list, the launch form (researchers), a job with its steps,
versions and training curves, its progress fragment (polled by htmx), and cancel."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse

from harness_app.roles import researcher_required
from training import selectors
from training.forms import RLJobLaunchForm
from training.models import RLJob
from training.services import rl_jobs
from training.views.jobs import JobPages, Said


def _detail_context(job: RLJob) -> dict[str, Any]:
    steps = selectors.rl_job_steps(job=job)
    overlaps, idle = selectors.job_step_timing(steps)
    return {
        "job": job,
        "steps": [(step, overlaps.get(step.index)) for step in steps],
        "idle": idle,
        "versions": selectors.rl_job_versions(job=job),
        "curves": selectors.rl_job_curves(steps),
    }


PAGES = JobPages(
    "rl_job", "RL job", selectors.rl_job_get, selectors.rl_job_list_page, _detail_context
)
rl_job_list, rl_job_detail, rl_job_progress = PAGES.read_views()


@researcher_required
def rl_job_launch(request: HttpRequest) -> HttpResponse:
    """The launch form; ?base_policy=<pk> and ?benchmark=<pk> preselect those (an export's
    "Launch RL from this export's policy")."""
    initial = {k: request.GET[k] for k in ("base_policy", "benchmark") if request.GET.get(k)}
    return PAGES.launch_page(
        request,
        RLJobLaunchForm(request.POST or None, initial=initial),
        create=_create,
        queued=lambda job: f"RL job {job.pk} queued: {job.steps} steps.",
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


def _cancel(job: RLJob) -> Said:
    if rl_jobs.rl_job_cancel(job=job):
        return messages.SUCCESS, f"RL job {job.pk} cancelled; its running batch was stopped."
    return messages.INFO, f"RL job {job.pk} had already finished."


rl_job_cancel = PAGES.action_view(_cancel)
