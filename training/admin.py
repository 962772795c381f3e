"""Exports, SFT jobs, RL jobs and the rollout service's requests in the admin: read-only,
because they are records of what a model was trained on; they change only through
training/services/."""

from __future__ import annotations

from django.contrib import admin

from harness_app.admin_base import ReadOnlyAdmin
from training.models import (
    PolicyVersion,
    RLJob,
    RLStep,
    RolloutDelivery,
    RolloutLease,
    RolloutRequest,
    SFTExport,
    SFTExportEpisode,
    SFTJob,
)


@admin.register(SFTExport)
class SFTExportAdmin(ReadOnlyAdmin):
    list_display = ("pk", "fmt", "status", "episodes", "records", "created_by", "created_at")
    list_filter = ("status", "fmt")


@admin.register(SFTExportEpisode)
class SFTExportEpisodeAdmin(ReadOnlyAdmin):
    list_display = ("export", "episode", "first_line", "records", "sha256")
    raw_id_fields = ("export", "episode")


@admin.register(SFTJob)
class SFTJobAdmin(ReadOnlyAdmin):
    list_display = ("pk", "name", "status", "export", "step", "total_steps", "created_at")
    list_filter = ("status",)
    raw_id_fields = ("export", "base_policy", "policy")
    list_select_related = ("export",)
    changelist_defer = ("history", "metrics", "manifest")


@admin.register(RLJob)
class RLJobAdmin(ReadOnlyAdmin):
    list_display = ("pk", "name", "status", "algorithm", "steps_done", "steps", "created_at")
    list_filter = ("status", "algorithm")


@admin.register(RLStep)
class RLStepAdmin(ReadOnlyAdmin):
    list_display = ("pk", "job", "index", "status", "batch", "finished_at")
    list_filter = ("status",)
    raw_id_fields = ("job", "batch", "version", "produced")
    list_select_related = ("job", "batch")
    changelist_defer = ("metrics",)


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdmin):
    list_display = ("pk", "job", "number", "policy", "trained_at_step", "created_at")
    raw_id_fields = ("job", "policy")
    list_select_related = ("job", "policy")


@admin.register(RolloutRequest)
class RolloutRequestAdmin(ReadOnlyAdmin):
    list_display = ("pk", "status", "benchmark", "policy", "groups_wanted", "created_at")
    list_filter = ("status",)
    raw_id_fields = ("benchmark", "policy", "batch", "created_by")
    list_select_related = ("benchmark", "policy")


@admin.register(RolloutDelivery)
class RolloutDeliveryAdmin(ReadOnlyAdmin):
    list_display = ("pk", "request", "group", "state", "times_delivered", "lease_expires_at")
    list_filter = ("state",)
    raw_id_fields = ("request", "group")


@admin.register(RolloutLease)
class RolloutLeaseAdmin(ReadOnlyAdmin):
    list_display = ("pk", "delivery", "consumer", "leased_at", "expires_at", "acked_at")
    raw_id_fields = ("delivery",)
