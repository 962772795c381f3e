"""The harness pages: tasks and a task's form, a group's runs with rewards and advantages,
and one page per run with its recorded calls, chains, token strips, evaluation and the CLI's
output.

A task is created here or through the API (/api/harness-tasks/), both through
`harness_runs.harness_task_create`; groups are launched through the API
(/api/harness-groups/).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from harness_app.roles import browse_required, researcher_required
from trajectories.forms import HarnessTaskCreateForm
from trajectories.models import HarnessTask
from trajectories.selectors import harness_tasks as selectors
from trajectories.services.harness_runs import HarnessTaskError, harness_task_create

PER_PAGE = 50


@browse_required
@require_GET
def harness_task_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.harness_tasks(), PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "trajectories/harness_task_list.html", {"page": page})


@researcher_required
def harness_task_new(request: HttpRequest) -> HttpResponse:
    form = HarnessTaskCreateForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        task = _task_create(request, form)
        if task is not None:
            messages.success(request, f"Harness task {task.name!r} created.")
            return redirect("harness_task_detail", pk=task.pk)
    return render(request, "trajectories/harness_task_form.html", {"form": form})


def _task_create(request: HttpRequest, form: HarnessTaskCreateForm) -> HarnessTask | None:
    data = form.cleaned_data
    try:
        return harness_task_create(
            name=data["name"],
            instruction=data["instruction"],
            files=form.task_files(),
            eval_command=data["eval_command"],
            timeout_s=data["timeout_s"],
            eval_timeout_s=data["eval_timeout_s"],
            created_by=request.user if isinstance(request.user, User) else None,
        )
    except HarnessTaskError as exc:
        field = form.files_field() if exc.field == "files" else exc.field
        form.add_error(field if field in form.fields else None, str(exc))
        return None


@browse_required
@require_GET
def harness_task_detail(request: HttpRequest, pk: int) -> HttpResponse:
    task = get_object_or_404(selectors.harness_tasks(), pk=pk)
    groups = selectors.harness_groups().filter(task=task)
    page = Paginator(groups, PER_PAGE).get_page(request.GET.get("page"))
    files = sorted(task.files.items())
    context = {"task": task, "page": page, "files": files}
    return render(request, "trajectories/harness_task_detail.html", context)


@browse_required
@require_GET
def harness_group_detail(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_object_or_404(selectors.harness_groups(), pk=pk)
    context = {"group": group, "view": selectors.harness_group_view(group=group)}
    return render(request, "trajectories/harness_group_detail.html", context)


@browse_required
@require_GET
def harness_run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = selectors.harness_run_get(pk=pk)
    if run is None:
        raise Http404("no such harness run")
    view = selectors.harness_run_view(run=run, now=timezone.now())
    context = {"run": run, "view": view, "episode": run.session.episode}
    return render(request, "trajectories/harness_run_detail.html", context)
