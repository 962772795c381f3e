"""The API for SFT exports, SFT jobs and RL jobs: researchers create them; everyone with a
role reads them."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import IsResearcher, ResearcherWrites, request_user
from training import selectors
from training.models import (
    ExportStatus,
    RLJob,
    RLStep,
    RolloutRequest,
    RolloutRequestStatus,
    SFTExport,
    SFTJob,
)
from training.rl.publish import PublishError
from training.serializers import (
    ExportCreateSerializer,
    ExportSerializer,
    RLJobCreateSerializer,
    RLJobDetailSerializer,
    RLJobSerializer,
    RolloutAckResultSerializer,
    RolloutAckSerializer,
    RolloutPullResultSerializer,
    RolloutPullSerializer,
    RolloutRequestCreateSerializer,
    RolloutRequestSerializer,
    SFTJobCreateSerializer,
    SFTJobDetailSerializer,
    SFTJobSerializer,
)
from training.services import rl_jobs, rollout_service, sft_exports, sft_jobs


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
            export = sft_exports.sft_export_create(
                created_by=request_user(request),
                filters=form.validated_data["filters"],
                fmt=form.validated_data["format"],
                reconstruction=form.validated_data["reconstruction"],
            )
        except sft_exports.ExportError as exc:
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


# --- RL jobs ---------------------------------------------------------------------------------


class RLJobViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[RLJob]
):
    """RL jobs: researchers launch and cancel them; everyone follows their steps."""

    permission_classes = [ResearcherWrites]

    def get_queryset(self) -> QuerySet[RLJob]:
        queryset = selectors.rl_jobs_queryset()
        if self.action == "retrieve":
            steps = RLStep.objects.select_related("version", "produced").order_by("index")
            queryset = queryset.prefetch_related(
                Prefetch("step_rows", queryset=steps), "versions__policy"
            )
        return queryset

    def get_serializer_class(self) -> Any:
        return RLJobDetailSerializer if self.action == "retrieve" else RLJobSerializer

    @extend_schema(request=RLJobCreateSerializer, responses={201: RLJobSerializer})
    def create(self, request: Request) -> Response:
        """Check and queue the job; its steps run on the training queue."""
        form = RLJobCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        try:
            job = rl_jobs.rl_job_create(
                benchmark=data.pop("benchmark"),
                base_policy=data.pop("base_policy"),
                base_model_dir=data.pop("base_model_dir"),
                name=data.pop("name"),
                job_settings=rl_jobs.job_settings_from(data, given=set(request.data)),
                created_by=request_user(request),
                warm_start=data.pop("warm_start"),
            )
        except rl_jobs.RLJobError as exc:
            raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
        return Response(RLJobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: RLJobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Stop the job after the piece of work in flight; its running batch is cancelled."""
        job = self.get_object()
        rl_jobs.rl_job_cancel(job=job)
        job.refresh_from_db()
        return Response(RLJobSerializer(job).data)


# --- SFT jobs --------------------------------------------------------------------------------


class SFTJobViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[SFTJob]
):
    """SFT jobs: researchers launch, cancel and resume them; everyone follows their loss."""

    permission_classes = [ResearcherWrites]

    def get_queryset(self) -> QuerySet[SFTJob]:
        return selectors.sft_jobs_queryset()

    def get_serializer_class(self) -> Any:
        return SFTJobDetailSerializer if self.action == "retrieve" else SFTJobSerializer

    @extend_schema(request=SFTJobCreateSerializer, responses={201: SFTJobSerializer})
    def create(self, request: Request) -> Response:
        """Check and queue the job; it trains on the training queue."""
        form = SFTJobCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        try:
            job = sft_jobs.sft_job_create(
                export=data.pop("export"),
                base_policy=data.pop("base_policy"),
                base_model_dir=data.pop("base_model_dir"),
                name=data.pop("name"),
                job_settings=sft_jobs.sft_settings_from(data),
                created_by=request_user(request),
            )
        except sft_jobs.SFTJobError as exc:
            raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
        return Response(SFTJobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: SFTJobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """A queued job is cancelled at once; a running one saves a checkpoint at its next
        step and stops (`cancel_requested` is true until it has)."""
        job = self.get_object()
        sft_jobs.sft_job_cancel(job=job)
        job.refresh_from_db()
        return Response(SFTJobSerializer(job).data)

    @extend_schema(
        request=None,
        responses={
            200: SFTJobSerializer,
            409: OpenApiResponse(
                description="the job is not cancelled or failed with a checkpoint"
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        """Queue a cancelled or failed job again, from its newest checkpoint."""
        job = self.get_object()
        try:
            job = sft_jobs.sft_job_resume(job=job)
        except sft_jobs.SFTJobError as exc:
            raise JobStateConflict(str(exc)) from None
        return Response(SFTJobSerializer(job).data)

    @extend_schema(
        request=None,
        responses={
            200: SFTJobSerializer,
            409: OpenApiResponse(description="the job has no trained adapter to publish"),
            502: OpenApiResponse(description="the model server refused the adapter"),
        },
    )
    @action(detail=True, methods=["post"])
    def publish(self, request: Request, pk: str) -> Response:
        """Serve the job's adapter: again after a vLLM restart, or, for a job whose publish
        failed after training, for the first time (the job then completes)."""
        job = self.get_object()
        try:
            sft_jobs.sft_job_publish(job=job)
        except sft_jobs.SFTJobError as exc:
            raise JobStateConflict(str(exc)) from None
        except PublishError as exc:
            raise ServerRefused(str(exc)) from None
        job.refresh_from_db()
        return Response(SFTJobSerializer(job).data)


class ServerRefused(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_detail = "the model server refused the adapter"
    default_code = "server_refused"


class JobStateConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the job is not in a state for that"
    default_code = "job_state"


# --- the rollout service ---------------------------------------------------------------------


class LeaseNotFound(APIException):
    status_code = status.HTTP_404_NOT_FOUND
    default_detail = "no such lease"
    default_code = "lease_unknown"


class LeaseConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the lease expired"
    default_code = "lease_expired"


# How often a long-polling pull looks again for a finished group.
PULL_POLL_S = 0.25


class RolloutRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[RolloutRequest]
):
    """The rollout service for outside trainers (docs/api.md): submit a batch spec, pull
    evaluated groups as they finish, acknowledge each one. Researchers only."""

    permission_classes = [IsResearcher]
    serializer_class = RolloutRequestSerializer

    def get_queryset(self) -> QuerySet[RolloutRequest]:
        return selectors.rollout_requests_queryset()

    @extend_schema(
        request=RolloutRequestCreateSerializer, responses={201: RolloutRequestSerializer}
    )
    def create(self, request: Request) -> Response:
        """Check the spec and launch its over-sampled groups on the rollout workers."""
        form = RolloutRequestCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            created = rollout_service.rollout_request_create(
                created_by=request_user(request), **form.validated_data
            )
        except rollout_service.RolloutServiceError as exc:
            raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
        data = RolloutRequestSerializer(created).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RolloutPullSerializer, responses={200: RolloutPullResultSerializer})
    @action(detail=True, methods=["post"])
    def pull(self, request: Request, pk: str) -> Response:
        """Lease up to `max_groups` finished, evaluated groups: token ids, logprobs, loss
        masks, rewards and group-relative advantages. Acknowledge each with `ack/` before
        its lease ends, or it is delivered again."""
        rollout_request = self.get_object()
        form = RolloutPullSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        args = form.validated_data
        deadline = time.monotonic() + args["wait_s"]
        while True:
            try:
                result = rollout_service.rollout_groups_pull(
                    request=rollout_request,
                    trainer_version=args["policy_version"],
                    max_groups=args["max_groups"],
                    consumer=args["consumer"],
                )
            except rollout_service.RolloutServiceError as exc:
                raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
            waiting = result.status == RolloutRequestStatus.OPEN and not result.groups
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(PULL_POLL_S)
        # Answered as built: the serializer describes the shape for the schema, but running
        # its per-item fields over every token id would cost more than building the group.
        return Response(
            {
                "status": result.status,
                "reason": result.reason,
                "groups": result.groups,
                "counts": result.counts,
            }
        )

    @extend_schema(
        request=RolloutAckSerializer,
        responses={
            200: RolloutAckResultSerializer,
            404: OpenApiResponse(description="no lease of this request has that token"),
            409: OpenApiResponse(
                description="the lease expired or was superseded; the group is delivered again"
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def ack(self, request: Request, pk: str) -> Response:
        """Acknowledge one pulled group by its lease token; acking it again is fine."""
        rollout_request = self.get_object()
        form = RolloutAckSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            acked = rollout_service.rollout_group_ack(
                request=rollout_request, token=form.validated_data["lease"]
            )
        except rollout_service.LeaseUnknown as exc:
            raise LeaseNotFound(str(exc)) from None
        except rollout_service.LeaseExpired as exc:
            raise LeaseConflict(str(exc)) from None
        return Response(RolloutAckResultSerializer(asdict(acked)).data)

    @extend_schema(request=None, responses={200: RolloutRequestSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Stop the request: its episodes are cancelled and nothing more is delivered."""
        rollout_request = self.get_object()
        rollout_service.rollout_request_cancel(request=rollout_request)
        return Response(
            RolloutRequestSerializer(self.get_queryset().get(pk=rollout_request.pk)).data
        )
