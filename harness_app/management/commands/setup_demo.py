"""Create the demo logins (and, once imported, the demo benchmark) for `make run`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from harness_app.roles import Role
from harness_app.services import user_ensure

DEMO_USERS = (
    # username, password, role, staff
    ("researcher", "harness-demo", Role.RESEARCHER, True),
    ("annotator", "harness-demo", Role.ANNOTATOR, False),
)


class Command(BaseCommand):
    help = "Create the demo logins and load the demo benchmark (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        for username, password, role, staff in DEMO_USERS:
            _, created = user_ensure(
                username=username, password=password, role=role, is_staff=staff
            )
            state = "created" if created else "exists, password unchanged"
            self.stdout.write(f"  login {username} / {password}  ({role.label.lower()}, {state})")
