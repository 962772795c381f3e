"""Admin for staff: browse corpora, benchmarks and imports; edit policy configs and users.

Corpora, documents, queries and qrels are written only by the importer (one transaction per
benchmark, content hashes kept true), so their admin pages are read-only (admin_base.py).
A user's password is changed through `services.users.user_password_set`, which also
revokes the user's API tokens.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminPasswordChangeForm

from harness_app.admin_base import ReadOnlyAdmin, StaffViewMixin
from harness_app.models import (
    Benchmark,
    Corpus,
    Document,
    ImportJob,
    PolicyConfig,
    Qrel,
    Query,
)
from harness_app.services.users import user_password_set


@admin.register(Corpus)
class CorpusAdmin(ReadOnlyAdmin):
    list_display = ("name", "doc_count", "index_status", "content_hash", "updated")
    list_filter = ("index_status",)
    search_fields = ("name", "content_hash")


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    list_display = ("external_id", "title", "corpus")
    list_select_related = ("corpus",)
    search_fields = ("external_id", "title")
    show_full_result_count = False  # counting a million documents per page view is slow
    changelist_defer = ("text",)


@admin.register(Benchmark)
class BenchmarkAdmin(ReadOnlyAdmin):
    list_display = ("name", "corpus", "source", "split", "created", "created_by")
    list_select_related = ("corpus", "created_by")
    list_filter = ("source",)
    search_fields = ("name",)


@admin.register(Query)
class QueryAdmin(ReadOnlyAdmin):
    list_display = ("external_id", "benchmark", "text", "answer")
    list_select_related = ("benchmark",)
    search_fields = ("external_id", "text")


@admin.register(Qrel)
class QrelAdmin(ReadOnlyAdmin):
    list_display = ("query", "document", "grade")
    list_select_related = ("query", "document")
    raw_id_fields = ("query", "document")
    show_full_result_count = False


@admin.register(ImportJob)
class ImportJobAdmin(ReadOnlyAdmin):
    list_display = ("name", "fmt", "status", "documents", "created_at", "finished_at", "created_by")
    list_filter = ("status", "fmt")
    list_select_related = ("created_by",)


@admin.register(PolicyConfig)
class PolicyConfigAdmin(StaffViewMixin, admin.ModelAdmin):
    # Staff may look; adding or editing a config still needs Django's permissions.
    list_display = (
        "name",
        "kind",
        "model",
        "base_url",
        "tool_call_format",
        "context_mode",
        "created",
    )
    list_filter = ("kind",)


class PasswordSetForm(AdminPasswordChangeForm):
    """The admin's password form, saved through the service (the API tokens go too)."""

    def save(self, commit: bool = True) -> Any:
        usable = self.cleaned_data["set_usable_password"]
        password = self.cleaned_data["password1"] if usable else None
        user_password_set(user=self.user, password=password)
        return self.user


class UserPasswordAdmin(UserAdmin):
    change_password_form = PasswordSetForm


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), UserPasswordAdmin)
