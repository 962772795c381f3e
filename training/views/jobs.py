"""What the RL and SFT job pages share: a kind's pages (`JobPages`: the list, a job's page,
its progress fragment, and the POST actions that say what they did and go back to the
job's page), and the launch form's page (the form, the service's refusal on the field it
names, a job whose task the broker did not take, the trainer's missing libraries)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django import forms
from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.paginator import Page
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from harness_app import jobs
from harness_app.roles import browse_required, researcher_required
from training import selectors
from training.models import TrainingJob
from training.services.jobs import TrainingJobError

Row = TypeVar("Row")
Job = TypeVar("Job", bound=TrainingJob)
Form = TypeVar("Form", bound=forms.Form)
View = Callable[..., HttpResponse]
# What an action did, for the page: a django.contrib.messages level and the text.
Said = tuple[int, str]


def row_or_404(get: Callable[..., Row | None], pk: int, *, what: str) -> Row:
    """`get(pk=pk)`, or a 404 saying `no <what> <pk>`."""
    row = get(pk=pk)
    if row is None:
        raise Http404(f"no {what} {pk}")
    return row


def request_user(request: HttpRequest) -> AbstractBaseUser | None:
    return request.user if isinstance(request.user, AbstractBaseUser) else None


@dataclass(frozen=True)
class JobPages(Generic[Job]):
    """One kind's pages. `name` ("rl_job") names its templates (training/<name>_list.html,
    _detail.html, _progress.html) and its URLs (<name>_detail)."""

    name: str
    what: str  # "RL job", in messages and 404s
    get: Callable[..., Job | None]
    list_page_of: Callable[..., Page[Job]]
    detail_context: Callable[[Job], dict[str, Any]]

    @property
    def templates(self) -> str:
        return f"training/{self.name}"

    @property
    def detail(self) -> str:
        return f"{self.name}_detail"

    def job_or_404(self, pk: int) -> Job:
        return row_or_404(self.get, pk, what=self.what)

    def read_views(self) -> tuple[View, View, View]:
        """The list, a job's page and its progress fragment."""
        return self.list_view(), self.detail_view(), self.progress_view()

    def list_view(self) -> View:
        def job_list(request: HttpRequest) -> HttpResponse:
            page = self.list_page_of(page=request.GET.get("page"))
            return render(request, f"{self.templates}_list.html", {"page": page})

        return browse_required(require_GET(job_list))

    def detail_view(self) -> View:
        def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
            context = self.detail_context(self.job_or_404(pk))
            return render(request, f"{self.templates}_detail.html", context)

        return browse_required(require_GET(job_detail))

    def progress_view(self) -> View:
        def job_progress(request: HttpRequest, pk: int) -> HttpResponse:
            context = {"job": self.job_or_404(pk)}
            return render(request, f"{self.templates}_progress.html", context)

        return browse_required(require_GET(job_progress))

    def action_view(self, act: Callable[[Job], Said]) -> View:
        """A researcher's POST on a job (cancel, resume, serve): `act` does it and says
        what happened, shown on the job's page."""

        def job_action(request: HttpRequest, pk: int) -> HttpResponse:
            job = self.job_or_404(pk)
            level, text = act(job)
            messages.add_message(request, level, text)
            return redirect(self.detail, pk=job.pk)

        job_action.__doc__ = act.__doc__
        return researcher_required(require_POST(job_action))

    def launch_page(
        self,
        request: HttpRequest,
        form: Form,
        *,
        create: Callable[[Form, AbstractBaseUser | None], Job],
        queued: Callable[[Job], str],
        template: str,
    ) -> HttpResponse:
        """The launch form; a valid POST calls `create`, whose TrainingJobError lands on
        the field it names, else says `queued(job)` and goes to the job's page. A job whose
        task the broker did not take (it failed, saying so) is told on the form."""
        if request.method == "POST" and form.is_valid():
            try:
                job = create(form, request_user(request))
            except TrainingJobError as exc:
                form.add_error(exc.field, str(exc))
            else:
                reason = jobs.send_error(job)
                if not reason:
                    messages.success(request, queued(job))
                    return redirect(self.detail, pk=job.pk)
                form.add_error(None, f"{self.what} {job.pk} could not start: {reason}")
        context = {
            "form": form,
            "missing_libraries": selectors.trainer_libraries_missing(),
            "what": self.what,
            "list_url": f"{self.name}_list",
        }
        return render(request, template, context)
