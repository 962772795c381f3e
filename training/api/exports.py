"""/api/exports/: immutable SFT exports; researchers create them, everyone with a role
reads them and downloads a done one's JSONL. The create's input and the export's row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.models import QuerySet
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import ResearcherWrites, request_user
from harness_app.harness.llm.reconstruct import PREFIX_MERGE, STRATEGIES, STRATEGY_ALIASES
from training.models import ExportFormat, ExportStatus, SFTExport
from training.services import exports

RECONSTRUCTION_NAMES = (*STRATEGIES, *STRATEGY_ALIASES)


class ExportCreateSerializer(serializers.Serializer[Any]):
    format = serializers.ChoiceField(choices=ExportFormat.choices, default=ExportFormat.CHAT)
    reconstruction = serializers.ChoiceField(
        choices=list(RECONSTRUCTION_NAMES),
        default=PREFIX_MERGE,
        help_text="model calls as one record per chain (prefix_merge) or per call "
        "(per_request); prefix and request are aliases",
    )
    filters = serializers.DictField(
        default=dict,
        help_text="episode filters as for /api/episodes/; without annotation_status, "
        "only approved episodes are exported",
    )


class ExportSerializer(serializers.ModelSerializer[SFTExport]):
    format = serializers.CharField(source="fmt", read_only=True)
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    download = serializers.SerializerMethodField()

    class Meta:
        model = SFTExport
        fields = [
            "id",
            "status",
            "format",
            "reconstruction",
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


class NotReady(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the export is not done yet"
    default_code = "not_ready"


class ExportViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[SFTExport]
):
    """Immutable JSONL snapshots of annotated episodes, with a manifest of hashes."""

    permission_classes = [ResearcherWrites]
    serializer_class = ExportSerializer

    def get_queryset(self) -> QuerySet[SFTExport]:
        return SFTExport.objects.select_related("created_by").order_by("-pk")

    @extend_schema(request=ExportCreateSerializer, responses={202: ExportSerializer})
    def create(self, request: Request) -> Response:
        """Queue an export; poll it until `status` is done, then download it."""
        form = ExportCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            export = exports.sft_export_create(
                created_by=request_user(request),
                filters=form.validated_data["filters"],
                fmt=form.validated_data["format"],
                reconstruction=form.validated_data["reconstruction"],
            )
        except exports.ExportError as exc:
            raise ValidationError({"filters": [str(exc)]}) from None
        data = ExportSerializer(export, context={"request": request}).data
        return Response(data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        responses={
            (200, "application/jsonl"): OpenApiTypes.BINARY,
            409: OpenApiResponse(description="the export is not done"),
        }
    )
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str) -> FileResponse:
        """The export's JSONL file, one record per line."""
        export = self.get_object()
        if export.status != ExportStatus.DONE:
            raise NotReady(f"export {export.pk} is {export.status}; download it once it is done")
        if not Path(export.file_path).is_file():
            raise NotFound(f"export {export.pk}'s file is missing from {export.file_path}")
        response = FileResponse(
            open(export.file_path, "rb"),  # noqa: SIM115 - FileResponse closes it
            as_attachment=True,
            filename=f"sft-export-{export.pk}.jsonl",
            content_type="application/jsonl",
        )
        response["X-Content-SHA256"] = export.manifest.get("sha256", "")
        return response
