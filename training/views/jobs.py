"""What the RL and SFT job pages share: a row or 404, a list page, and the launch form's
page (the form, the service's refusal on the field it names, a job whose task the broker
did not take, the trainer's missing libraries)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.paginator import Page
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from harness_app import jobs
from training import selectors
from training.models import TrainingJob
from training.services.jobs import TrainingJobError

Row = TypeVar("Row")
Job = TypeVar("Job", bound=TrainingJob)
Form = TypeVar("Form", bound=forms.Form)


def row_or_404(get: Callable[..., Row | None], pk: int, *, what: str) -> Row:
    """`get(pk=pk)`, or a 404 saying `no <what> <pk>`."""
    row = get(pk=pk)
    if row is None:
        raise Http404(f"no {what} {pk}")
    return row


def list_page(
    request: HttpRequest, list_page_of: Callable[..., Page[Any]], template: str
) -> HttpResponse:
    page = list_page_of(page=request.GET.get("page"))
    return render(request, template, {"page": page})


def request_user(request: HttpRequest) -> AbstractBaseUser | None:
    return request.user if isinstance(request.user, AbstractBaseUser) else None


def launch_page(
    request: HttpRequest,
    form: Form,
    *,
    create: Callable[[Form, AbstractBaseUser | None], Job],
    queued: Callable[[Job], str],
    detail: str,
    template: str,
) -> HttpResponse:
    """The launch form; a valid POST calls `create`, whose TrainingJobError lands on the
    field it names, else says `queued(job)` and goes to the job's page (`detail`). A job
    whose task the broker did not take (it failed, saying so) is told on the form."""
    if request.method == "POST" and form.is_valid():
        try:
            job = create(form, request_user(request))
        except TrainingJobError as exc:
            form.add_error(exc.field, str(exc))
        else:
            reason = jobs.send_error(job)
            if not reason:
                messages.success(request, queued(job))
                return redirect(detail, pk=job.pk)
            form.add_error(None, f"{job.kind_label} {job.pk} could not start: {reason}")
    context = {"form": form, "missing_libraries": selectors.trainer_libraries_missing()}
    return render(request, template, context)
