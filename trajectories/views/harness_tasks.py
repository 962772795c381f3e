"""The harness pages: tasks, a group's runs with rewards and advantages, and one page per
run with its recorded calls, chains, token strips, evaluation and the CLI's output.

Tasks and groups are created through the API (/api/harness-tasks/, /api/harness-groups/);
these pages read.
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from harness_app.roles import browse_required
from trajectories.selectors import harness_tasks as selectors

PER_PAGE = 50


@browse_required
@require_GET
def harness_task_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.harness_tasks(), PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "trajectories/harness_task_list.html", {"page": page})


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
