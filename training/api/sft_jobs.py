"""/api/sft-jobs/: researchers launch, cancel, resume and publish SFT jobs; everyone
follows their loss. The create's input (types only), the job's row, and its detail with
the per-step history and the trainer's manifest."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import NOT_QUEUED_ANSWER, not_queued
from harness_app.models import PolicyConfig
from harness_app.serializers import RowIdField
from training import selectors
from training.api.jobs import JobStateConflict, ServerRefused, TrainingJobViewSet
from training.models import SFTExport, SFTJob
from training.rl.publish import PublishError
from training.services import sft_jobs
from training.sft.settings import (
    SFTJobSettings,
    sft_lora_alpha_default,
    sft_lora_rank_default,
)

SFT_DEFAULTS = SFTJobSettings()


class SFTJobCreateSerializer(serializers.Serializer[Any]):
    """Types only: ranges and the set-up (a done, non-empty export; a vLLM policy; the
    weights on disk) are checked by sft_jobs.sft_job_create, which names what it refuses."""

    name = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)
    export = RowIdField(queryset=SFTExport.objects.all())
    base_policy = RowIdField(
        queryset=PolicyConfig.objects.all(),
        help_text="the student: the OpenAI-compatible policy whose vLLM server serves the adapter",
    )
    base_model_dir = serializers.CharField(
        help_text="local folder of the weights the base policy's vLLM server serves"
    )
    lora_rank = serializers.IntegerField(
        default=sft_lora_rank_default,
        help_text="default: 32 (Harness-1), or the vLLM server's largest (LLM_MAX_LORA_RANK) "
        "when that is less",
    )
    lora_alpha = serializers.IntegerField(
        default=sft_lora_alpha_default, help_text="default: twice the default rank"
    )
    lora_dropout = serializers.FloatField(default=SFT_DEFAULTS.lora_dropout)
    lora_targets = serializers.ListField(
        child=serializers.CharField(), default=lambda: list(SFT_DEFAULTS.lora_targets)
    )
    learning_rate = serializers.FloatField(default=SFT_DEFAULTS.learning_rate)
    epochs = serializers.FloatField(default=SFT_DEFAULTS.epochs)
    max_length = serializers.IntegerField(
        default=SFT_DEFAULTS.max_length, help_text="tokens per record; longer ones are truncated"
    )
    batch_size = serializers.IntegerField(default=SFT_DEFAULTS.batch_size)
    grad_accum = serializers.IntegerField(default=SFT_DEFAULTS.grad_accum)
    eval_fraction = serializers.FloatField(
        default=SFT_DEFAULTS.eval_fraction, help_text="held-out share of the episodes"
    )
    seed = serializers.IntegerField(default=SFT_DEFAULTS.seed)
    gradient_checkpointing = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="null: on for CUDA only"
    )
    save_steps = serializers.IntegerField(default=SFT_DEFAULTS.save_steps)
    eval_steps = serializers.IntegerField(default=SFT_DEFAULTS.eval_steps)


class SFTJobSerializer(serializers.ModelSerializer[SFTJob]):
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    progress = serializers.FloatField(help_text="steps done / total steps, 0 to 1", read_only=True)
    model = serializers.CharField(
        source="policy.model", default=None, read_only=True, help_text="the served adapter"
    )

    class Meta:
        model = SFTJob
        fields = [
            "id",
            "name",
            "status",
            "progress",
            "step",
            "total_steps",
            "cancel_requested",
            "export",
            "base_policy",
            "base_model_dir",
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
            "lora_targets",
            "learning_rate",
            "epochs",
            "max_length",
            "batch_size",
            "grad_accum",
            "eval_fraction",
            "seed",
            "gradient_checkpointing",
            "save_steps",
            "eval_steps",
            "metrics",
            "policy",
            "model",
            "adapter_path",
            "checkpoint_path",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class SFTJobDetailSerializer(SFTJobSerializer):
    """With the per-step history (train and eval loss) and the trainer's manifest."""

    class Meta(SFTJobSerializer.Meta):
        fields = [*SFTJobSerializer.Meta.fields, "manifest", "history", "output_dir"]
        read_only_fields = fields


class SFTJobViewSet(TrainingJobViewSet[SFTJob]):
    """SFT jobs: researchers launch, cancel and resume them; everyone follows their loss."""

    input_serializer = SFTJobCreateSerializer
    output_serializer = SFTJobSerializer
    detail_serializer = SFTJobDetailSerializer
    create_doc = "Check and queue the job; it trains on the training queue."
    cancel_doc = (
        "A queued job is cancelled at once; a running one saves a checkpoint at its next\n"
        "step and stops (`cancel_requested` is true until it has)."
    )

    def get_queryset(self) -> QuerySet[SFTJob]:
        return selectors.sft_jobs_queryset()

    def job_create(self, request: Request, data: dict[str, Any], **common: Any) -> SFTJob:
        return sft_jobs.sft_job_create(
            export=data.pop("export"), job_settings=sft_jobs.sft_settings_from(data), **common
        )

    def job_cancel(self, job: SFTJob) -> None:
        sft_jobs.sft_job_cancel(job=job)

    @extend_schema(
        request=None,
        responses={
            200: SFTJobSerializer,
            409: OpenApiResponse(
                description="the job is not cancelled or failed with a checkpoint"
            ),
            503: NOT_QUEUED_ANSWER,
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
        body = SFTJobSerializer(job).data
        return not_queued(job, body) or Response(body)

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
