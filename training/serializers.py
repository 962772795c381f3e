"""API input and output shapes for SFT exports."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from training.models import ExportFormat, ExportStatus, SFTExport


class ExportCreateSerializer(serializers.Serializer[Any]):
    format = serializers.ChoiceField(choices=ExportFormat.choices, default=ExportFormat.CHAT)
    filters = serializers.DictField(
        default=dict,
        help_text="episode filters as for /api/episodes/; without annotation_status, "
        "only approved episodes are exported",
    )


class ExportSerializer(serializers.ModelSerializer[SFTExport]):
    format = serializers.CharField(source="fmt", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None)
    download = serializers.SerializerMethodField()

    class Meta:
        model = SFTExport
        fields = [
            "id",
            "status",
            "format",
            "filters",
            "episodes",
            "records",
            "skipped",
            "manifest",
            "error",
            "download",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_download(self, export: SFTExport) -> str | None:
        """Where the JSONL can be fetched once the export is done."""
        if export.status != ExportStatus.DONE:
            return None
        request = self.context.get("request")
        path = f"/api/exports/{export.pk}/download/"
        return request.build_absolute_uri(path) if request is not None else path
