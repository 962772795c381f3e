"""Users and their role groups."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.db import transaction

from harness_app.roles import Role


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
