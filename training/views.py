"""The RL and SFT job pages: the lists, the launch forms (researchers), a job with its
training curves (and an SFT job's lineage), its progress fragment (polled by htmx), and
cancel (and an SFT job's resume and re-serve). The SFT export pages: list, create (with
the count of what it would export, re-counted as the form changes), one export and its
progress fragment."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app.ids import as_id
from harness_app.roles import browse_required, researcher_required
from training import selectors
from training.forms import RLJobLaunchForm, SFTExportCreateForm, SFTJobLaunchForm
from training.models import RLJob, SFTExport, SFTJob, SFTJobStatus
from training.rl.publish import PublishError
from training.services import rl_jobs, sft_exports, sft_jobs
from trajectories.episode_filters import episodes_matching


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
    """The launch form; ?base_policy=<pk> and ?benchmark=<pk> preselect those (an export's
    "Launch RL from this export's policy")."""
    initial = {k: request.GET[k] for k in ("base_policy", "benchmark") if request.GET.get(k)}
    form = RLJobLaunchForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        job = _launch(request, form)
        if job is not None:
            messages.success(request, f"RL job {job.pk} queued: {job.steps} steps.")
            return redirect("rl_job_detail", pk=job.pk)
    context = {"form": form, "missing_libraries": selectors.trainer_libraries_missing()}
    return render(request, "training/rl_job_launch.html", context)


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
            warm_start=data.get("warm_start"),
        )
    except rl_jobs.RLJobError as exc:
        form.add_error(exc.field, str(exc))
        return None


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


# --- SFT jobs --------------------------------------------------------------------------------


def _sft_job_or_404(pk: int) -> SFTJob:
    job = selectors.sft_job_get(pk=pk)
    if job is None:
        raise Http404(f"no SFT job {pk}")
    return job


@browse_required
@require_GET
def sft_job_list(request: HttpRequest) -> HttpResponse:
    page = selectors.sft_job_list_page(page=request.GET.get("page"))
    return render(request, "training/sft_job_list.html", {"page": page})


@researcher_required
def sft_job_launch(request: HttpRequest) -> HttpResponse:
    """The launch form; ?export=<pk> preselects an export."""
    form = SFTJobLaunchForm(request.POST or None, initial={"export": request.GET.get("export")})
    if request.method == "POST" and form.is_valid():
        job = _sft_launch(request, form)
        if job is not None:
            messages.success(request, f"SFT job {job.pk} queued on export {job.export_id}.")
            return redirect("sft_job_detail", pk=job.pk)
    context = {"form": form, "missing_libraries": selectors.trainer_libraries_missing()}
    return render(request, "training/sft_job_launch.html", context)


def _sft_launch(request: HttpRequest, form: SFTJobLaunchForm) -> SFTJob | None:
    data = form.cleaned_data
    user = request.user if isinstance(request.user, AbstractBaseUser) else None
    try:
        return sft_jobs.sft_job_create(
            export=data["export"],
            base_policy=data["base_policy"],
            base_model_dir=data["base_model_dir"],
            job_settings=sft_jobs.sft_settings_from(data),
            name=data["name"],
            created_by=user,
        )
    except sft_jobs.SFTJobError as exc:
        form.add_error(exc.field, str(exc))
        return None


@browse_required
@require_GET
def sft_job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = _sft_job_or_404(pk)
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
    return render(request, "training/sft_job_progress.html", {"job": _sft_job_or_404(pk)})


@researcher_required
@require_POST
def sft_job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    job = _sft_job_or_404(pk)
    if not sft_jobs.sft_job_cancel(job=job):
        messages.info(request, f"SFT job {job.pk} had already finished.")
    elif job.status == SFTJobStatus.QUEUED:
        messages.success(request, f"SFT job {job.pk} cancelled.")
    else:
        messages.success(request, f"SFT job {job.pk} stops after its current step.")
    return redirect("sft_job_detail", pk=job.pk)


@researcher_required
@require_POST
def sft_job_resume(request: HttpRequest, pk: int) -> HttpResponse:
    job = _sft_job_or_404(pk)
    try:
        sft_jobs.sft_job_resume(job=job)
    except sft_jobs.SFTJobError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"SFT job {job.pk} queued again from its checkpoint.")
    return redirect("sft_job_detail", pk=job.pk)


@researcher_required
@require_POST
def sft_job_serve(request: HttpRequest, pk: int) -> HttpResponse:
    """Serve the adapter: again after a vLLM restart, or after its publish failed."""
    job = _sft_job_or_404(pk)
    try:
        loaded = sft_jobs.sft_job_publish(job=job)
    except (sft_jobs.SFTJobError, PublishError) as exc:
        messages.error(request, str(exc))
    else:
        said = "is served" if loaded else "was already served"
        messages.success(request, f"SFT job {job.pk}'s adapter {said}.")
    return redirect("sft_job_detail", pk=job.pk)


# --- SFT exports -----------------------------------------------------------------------------


def _export_or_404(pk: int) -> SFTExport:
    export = selectors.sft_export_get(pk=pk)
    if export is None:
        raise Http404(f"no SFT export {pk}")
    return export


@browse_required
@require_GET
def sft_export_list(request: HttpRequest) -> HttpResponse:
    """Every export; ?episode=<pk> keeps those holding that episode."""
    episode = as_id(request.GET.get("episode"))
    page = selectors.sft_export_list_page(page=request.GET.get("page"), episode=episode)
    return render(request, "training/sft_export_list.html", {"page": page, "episode": episode})


@researcher_required
def sft_export_create(request: HttpRequest) -> HttpResponse:
    """The options of POST /api/exports/; ?episodes=1,2,3 pre-fills the episode ids. An
    export of no episode is refused on the form, naming the filter that emptied it."""
    initial = {"ids": request.GET.get("episodes", "")}
    form = SFTExportCreateForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        user = request.user if isinstance(request.user, AbstractBaseUser) else None
        try:
            export = sft_exports.sft_export_create(
                created_by=user,
                filters=data["filters"],
                fmt=data["fmt"],
                reconstruction=data["reconstruction"],
            )
        except sft_exports.ExportError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"SFT export {export.pk} queued.")
            return redirect("sft_export_detail", pk=export.pk)
    return render(request, "training/sft_export_create.html", {"form": form})


@researcher_required
@require_GET
def sft_export_preview(request: HttpRequest) -> HttpResponse:
    """The create form's count: the episodes its filters would export, clause by clause.
    htmx asks again whenever the form changes."""
    form = SFTExportCreateForm(request.GET)
    context: dict[str, Any] = {"form": form}
    if form.is_valid():
        try:
            context["preview"] = sft_exports.sft_export_preview(
                filters=form.cleaned_data["filters"]
            )
        except sft_exports.ExportError as exc:
            context["problem"] = str(exc)
    else:
        name, errors = next(iter(form.errors.items()))
        field = form.fields.get(name)
        context["problem"] = f"{field.label}: {errors[0]}" if field else errors[0]
    return render(request, "training/sft_export_preview.html", context)


@browse_required
@require_GET
def sft_export_detail(request: HttpRequest, pk: int) -> HttpResponse:
    context = _export_live_context(_export_or_404(pk))
    return render(request, "training/sft_export_detail.html", context)


@browse_required
@require_GET
def sft_export_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """What changes on an export's page while it runs. htmx polls it while the export is
    queued or running; a finished export's answer carries no trigger, so polling stops."""
    context = _export_live_context(_export_or_404(pk))
    return render(request, "training/sft_export_live.html", context)


def _export_live_context(export: SFTExport) -> dict[str, Any]:
    context: dict[str, Any] = {"export": export}
    if export.is_finished:
        context["rl_launch"] = urlencode(selectors.export_launch_defaults(export))
    else:  # what the worker has to write, counted again while it runs
        context["matching"] = episodes_matching(filters=export.filters).count()
    return context
