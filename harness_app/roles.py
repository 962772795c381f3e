"""Who may do what.

Two groups carry the roles. Researchers do everything; annotators browse and annotate but
cannot launch rollouts, exports or training. Superusers count as researchers. Staff get the
Django admin through `is_staff`, independent of these roles. Views check roles through the
decorators here so the rule lives in one place (the API reuses `user_has_role`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    ANNOTATOR = "annotator", "Annotator"


# Every role that may browse rollouts; launching needs RESEARCHER.
BROWSE_ROLES = (Role.RESEARCHER, Role.ANNOTATOR)

User = AbstractBaseUser | AnonymousUser


def user_roles(user: Any) -> frozenset[str]:
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    cached = getattr(user, "_harness_roles", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        if user.is_superuser:
            names.add(Role.RESEARCHER)
        cached = frozenset(n for n in names if n in Role.values)
        user._harness_roles = cached
    return cached


def user_has_role(user: Any, *roles: str) -> bool:
    return bool(user_roles(user) & set(roles))


def role_required(
    *roles: str,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Let the view run only for users holding one of `roles`; others get a 403 page."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if user_has_role(request.user, *roles):
                return view(request, *args, **kwargs)
            needed = " or ".join(Role(r).label.lower() for r in roles)
            return render(request, "403.html", {"needed": needed}, status=403)

        return wrapper

    return decorator


researcher_required = role_required(Role.RESEARCHER)
browse_required = role_required(*BROWSE_ROLES)


def roles_context(request: HttpRequest) -> dict[str, bool]:
    roles = user_roles(request.user)
    return {
        "is_researcher": Role.RESEARCHER in roles,
        "is_annotator": Role.ANNOTATOR in roles,
    }
