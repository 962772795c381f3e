"""Users, their role groups, their passwords and their API tokens.

A password change revokes the user's API tokens: a token must not outlive the password
that obtained it (issue 21.6). Every place that changes a password goes through
`user_password_set` (the admin's password form included), so the revocation is a line
here and not a hook on every save of a user.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.db import transaction
from rest_framework.authtoken.models import Token

from harness_app.roles import Role
from harness_app.tokens import token_expired


@transaction.atomic
def user_ensure(
    *, username: str, password: str, role: Role | None, is_staff: bool = False
) -> tuple[AbstractUser, bool]:
    """Create the user if missing and give it exactly `role`; returns (user, created).

    An existing user keeps its password: re-running the demo set-up must not reset a
    password somebody changed.
    """
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_password(password)
    user.is_staff = is_staff or user.is_staff
    user.save()
    role_groups = Group.objects.filter(name__in=Role.values)
    user.groups.remove(*role_groups)
    if role is not None:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    return user, created


@transaction.atomic
def user_password_set(*, user: Any, password: str | None) -> None:
    """Give the user a new password (None: an unusable one, no password login) and revoke
    their API tokens."""
    if password is None:
        user.set_unusable_password()
    else:
        user.set_password(password)
    user.save(update_fields=["password"])
    Token.objects.filter(user_id=user.pk).delete()


@transaction.atomic
def api_token_obtain(*, user: Any) -> Token:
    """The user's API token; a new one when there is none or it has expired."""
    token, _ = Token.objects.get_or_create(user=user)
    if token_expired(token):
        token.delete()
        token = Token.objects.create(user=user)
    return token
