"""The admin base class shared by the apps whose rows are records, not settings.

Imported rows (corpora, queries, qrels) and rollout records (episodes, turns, model calls,
annotations and their audit trail) are written only by their services, which keep
denormalised columns and content hashes true; an edit in the admin would silently break
them. So these admins are view-only.

Staff see them without per-model permissions: `is_staff` is the admin gate in this project
(harness_app/roles.py), and the demo's staff researcher holds no model permissions. Deleting
still needs Django's delete permission, so only superusers can remove a record.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest


def _is_active_staff(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and getattr(user, "is_staff", False))


class StaffViewMixin:
    """Any active staff user may view the model's changelist and detail pages."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_active_staff(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _is_active_staff(request)


class _DeferringChangeList(ChangeList):
    """A changelist that leaves the admin's `changelist_defer` columns unread: a page of
    100 model calls would otherwise fetch every request's prompt tokens."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        queryset = super().get_queryset(request, exclude_parameters)
        deferred = getattr(self.model_admin, "changelist_defer", ())
        return queryset.defer(*deferred) if deferred else queryset


class ReadOnlyAdmin(StaffViewMixin, admin.ModelAdmin):
    # Big columns the changelist never shows; the detail page still reads them.
    changelist_defer: tuple[str, ...] = ()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _DeferringChangeList
