"""Exports in the admin: read-only, because an export is an immutable record."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from training.models import SFTExport, SFTExportEpisode


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SFTExport)
class SFTExportAdmin(ReadOnlyAdmin):
    list_display = ("pk", "fmt", "status", "episodes", "records", "created_by", "created_at")
    list_filter = ("status", "fmt")


@admin.register(SFTExportEpisode)
class SFTExportEpisodeAdmin(ReadOnlyAdmin):
    list_display = ("export", "episode", "first_line", "records", "sha256")
    raw_id_fields = ("export", "episode")
