"""API input and output shapes for benchmarks, imports and policy configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from rest_framework import serializers

from harness_app.harness.llm.chat_policy import SYSTEM_PROMPTS
from harness_app.ids import as_id, id_problem
from harness_app.models import Benchmark, ImportJob, PolicyConfig, PolicyKind, VerifierKind
from harness_app.selectors import import_job_progress
from harness_app.upload_limits import (
    FORMAT_CHOICES,
    MAX_UPLOAD_BYTES,
    UPLOAD_KINDS,
    UPLOAD_SUFFIXES,
    split_validator,
)

# What Sampling.from_json reads; anything else would be ignored without a word.
SAMPLING_TYPES: dict[str, type] = {
    "temperature": float,
    "top_p": float,
    "max_tokens": int,
    "seed": int,
}


class RowIdField(serializers.PrimaryKeyRelatedField):
    """A related row named by its id, which must be a whole number in the id range.

    DRF's own field passes the value to the query as it is, where 1.7 becomes row 1; here
    `1.7`, `true` and ids past 64 bits are refused, naming the field (harness_app/ids.py).
    """

    def to_internal_value(self, data: Any) -> Any:
        if as_id(data) is None:
            raise serializers.ValidationError(id_problem(data))
        return super().to_internal_value(data)


class BoundedIntegerField(serializers.IntegerField):
    """An integer between `low` and `high`, refused before any service runs with the
    service's own words: "<field> must be between <low> and <high>, got <value>"."""

    def __init__(self, *, low: int, high: int, **kwargs: Any) -> None:
        super().__init__(min_value=low, max_value=high, **kwargs)
        self.low, self.high = low, high

    def to_internal_value(self, data: Any) -> int:
        value = super().to_internal_value(data)
        if not self.low <= value <= self.high:
            raise serializers.ValidationError(
                f"{self.field_name} must be between {self.low} and {self.high}, got {value}"
            )
        return value


class BenchmarkSerializer(serializers.ModelSerializer[Benchmark]):
    corpus = serializers.CharField(source="corpus.name", read_only=True)
    documents = serializers.IntegerField(source="corpus.doc_count", read_only=True)
    index_status = serializers.CharField(source="corpus.index_status", read_only=True)
    queries = serializers.IntegerField(source="query_count", read_only=True)
    qrels = serializers.IntegerField(source="qrel_count", read_only=True)

    class Meta:
        model = Benchmark
        fields = [
            "id",
            "name",
            "source",
            "split",
            "content_hash",
            "corpus",
            "documents",
            "index_status",
            "queries",
            "qrels",
            "created",
        ]


class BenchmarkImportSerializer(serializers.Serializer[Any]):
    file = serializers.FileField(
        help_text="A .zip of a BEIR, BrowseComp-Plus or FRAMES folder, a HotpotQA or "
        "2WikiMultihopQA .json, or a MuSiQue or 2WikiMultihopQA .jsonl file."
    )
    format = serializers.ChoiceField(
        choices=FORMAT_CHOICES,
        default="auto",
        help_text="How to read the file; auto detects it from its layout or first record.",
    )
    name = serializers.CharField(max_length=200)
    split = serializers.CharField(max_length=50, default="test", validators=[split_validator])
    replace = serializers.BooleanField(default=False)

    def validate_file(self, upload: UploadedFile) -> UploadedFile:
        if Path(upload.name or "").suffix.lower() not in UPLOAD_SUFFIXES:
            raise serializers.ValidationError(f"upload {UPLOAD_KINDS}")
        if upload.size and upload.size > MAX_UPLOAD_BYTES:
            raise serializers.ValidationError(f"the file is larger than {MAX_UPLOAD_BYTES:,} bytes")
        return upload


class ImportProgressSerializer(serializers.Serializer[Any]):
    phase = serializers.CharField()
    documents = serializers.IntegerField()
    total_documents = serializers.IntegerField()
    rate = serializers.IntegerField(help_text="documents per second")


class ImportJobSerializer(serializers.ModelSerializer[ImportJob]):
    progress = serializers.SerializerMethodField()
    # The API's names from before the job kernel named every job's columns alike.
    created = serializers.DateTimeField(source="created_at", read_only=True)
    finished = serializers.DateTimeField(source="finished_at", read_only=True, allow_null=True)

    class Meta:
        model = ImportJob
        fields = [
            "id",
            "name",
            "fmt",
            "split",
            "replace",
            "status",
            "documents",
            "queries",
            "qrels",
            "message",
            "benchmark",
            "progress",
            "created",
            "finished",
        ]

    def get_progress(self, job: ImportJob) -> dict[str, Any] | None:
        progress = import_job_progress(job)
        return None if progress is None else ImportProgressSerializer(progress).data


class PolicyConfigSerializer(serializers.ModelSerializer[PolicyConfig]):
    class Meta:
        model = PolicyConfig
        fields = ["id", *PolicyConfig.EDITABLE_FIELDS, "version", "previous", "created"]
        read_only_fields = ["id", "version", "previous", "created"]
        extra_kwargs = {
            "version": {"help_text": "1, or one more than `previous`'s"},
            "previous": {"help_text": "the config this version was edited from"},
        }

    def validate_sampling(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError('an object such as {"temperature": 0.7}')
        for key, item in value.items():
            kind = SAMPLING_TYPES.get(key)
            if kind is None:
                known = ", ".join(SAMPLING_TYPES)
                raise serializers.ValidationError(f"unknown setting {key!r}; use {known}")
            numeric = (int, float) if kind is float else (int,)
            if isinstance(item, bool) or not isinstance(item, numeric):
                wanted = "a number" if kind is float else "an integer"
                raise serializers.ValidationError(f"{key} must be {wanted}, got {item!r}")
        return value

    def validate_system_prompt_version(self, value: str) -> str:
        if value not in SYSTEM_PROMPTS:
            raise serializers.ValidationError(f"unknown version; use {', '.join(SYSTEM_PROMPTS)}")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("kind") == PolicyKind.OPENAI and not attrs.get("model"):
            raise serializers.ValidationError({"model": "an OpenAI-compatible policy needs one"})
        if attrs.get("verifier") == VerifierKind.LLM and not attrs.get("verifier_model"):
            raise serializers.ValidationError(
                {"verifier_model": "the LLM verifier needs the model its server serves"}
            )
        if attrs.get("reranker_base_url") and not attrs.get("reranker_model"):
            raise serializers.ValidationError(
                {"reranker_model": "name the reranking model, or leave reranker_base_url empty"}
            )
        return attrs


class PolicyConfigSavedSerializer(PolicyConfigSerializer):
    """A config as saved, with what the save has to say besides."""

    warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="e.g. that the server's /models could not be asked, so the model name "
        "was not checked",
    )

    class Meta(PolicyConfigSerializer.Meta):
        fields = [*PolicyConfigSerializer.Meta.fields, "warnings"]


class PolicyInUseSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField(help_text="what uses the config")
