"""The recording-session pages: the list with counts, the create form that shows the new
key once, and close and revoke for a session's owner or staff.

The key exists only in the create response (trajectories/services/recording.py stores its
hash): the result page is rendered straight from the POST, marked not to be cached.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from harness_app.roles import researcher_required
from trajectories.forms import RecordingCreateForm
from trajectories.models import RecordingSession
from trajectories.selectors import recording as selectors
from trajectories.services import recording

PER_PAGE = 50
# The service names the input it refuses; these are the form's names for them.
_FORM_FIELDS = {"ttl_s": "ttl_hours"}


@researcher_required
@require_GET
def recording_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.recording_sessions_for_list(), PER_PAGE).get_page(
        request.GET.get("page")
    )
    now = timezone.now()
    rows = [
        (
            session,
            selectors.session_state(session, now=now),
            selectors.recording_session_manageable_by(session, request.user),
        )
        for session in page.object_list
    ]
    return render(request, "trajectories/recording_list.html", {"page": page, "rows": rows})


@researcher_required
@never_cache
def recording_create(request: HttpRequest) -> HttpResponse:
    form = RecordingCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = request.user if isinstance(request.user, AbstractBaseUser) else None
        try:
            session, key = recording.recording_session_create(
                user=user,
                name=form.cleaned_data["name"],
                task=form.cleaned_data["task"],
                ttl_s=form.ttl_s(),
                sampling=form.sampling(),
            )
        except recording.RecordingError as exc:
            field = exc.field.removeprefix("sampling.")
            field = _FORM_FIELDS.get(field, field)
            form.add_error(field if field in form.fields else None, str(exc))
        else:
            context = {"session": session, "key": key, "base_url": _proxy_root(request, key)}
            return render(request, "trajectories/recording_created.html", context)
    return render(request, "trajectories/recording_create.html", {"form": form})


def _proxy_root(request: HttpRequest, key: str) -> str:
    """The session's proxy root as this browser reached the server (PROXY_PUBLIC_URL is
    where a harness worker reaches it, which can be another address)."""
    path = reverse("proxy_models", kwargs={"key": key}).removesuffix("/v1/models")
    return request.build_absolute_uri(path)


@researcher_required
@require_POST
def recording_close(request: HttpRequest, pk: int) -> HttpResponse:
    session = _manageable(request, pk)
    if session is not None:
        try:
            recording.recording_session_close(session=session)
        except recording.RecordingError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Recording session {pk} closed; its key stops working.")
    return redirect("recording_list")


@researcher_required
@require_POST
def recording_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    session = _manageable(request, pk)
    if session is not None:
        recording.recording_session_revoke(session=session)
        messages.success(request, f"Recording session {pk} revoked; what it recorded stays.")
    return redirect("recording_list")


def _manageable(request: HttpRequest, pk: int) -> RecordingSession | None:
    session = get_object_or_404(RecordingSession.objects.select_related("created_by"), pk=pk)
    if selectors.recording_session_manageable_by(session, request.user):
        return session
    owner = session.created_by.get_username() if session.created_by else "nobody"
    messages.error(
        request,
        f"Recording session {pk} is {owner}'s; only its owner or staff may close or revoke it.",
    )
    return None
