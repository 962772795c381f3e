"""Forms of the harness app's pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.validators import RegexValidator

from harness_app.importers.formats import SPLIT_PATTERN
from harness_app.models import PolicyConfig

MAX_UPLOAD_BYTES = 2 * 1024**3
UPLOAD_SUFFIXES = (".zip", ".json")

# The split names a file (qrels/<split>.tsv), so it may not carry a path.
split_validator = RegexValidator(SPLIT_PATTERN, "Use letters, digits, '.', '_' or '-'.")


class BenchmarkUploadForm(forms.Form):
    file = forms.FileField(
        help_text="A .zip of a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) "
        "or an official HotpotQA .json file."
    )
    name = forms.CharField(max_length=200, help_text="The benchmark's name; must be unique.")
    split = forms.CharField(
        max_length=50,
        initial="test",
        validators=[split_validator],
        help_text="Which qrels/<split>.tsv of a BEIR folder to import.",
    )
    replace = forms.BooleanField(
        required=False, help_text="Swap out an existing benchmark of this name."
    )

    def clean_file(self) -> UploadedFile:
        upload: UploadedFile = self.cleaned_data["file"]
        if Path(upload.name or "").suffix.lower() not in UPLOAD_SUFFIXES:
            raise forms.ValidationError("Upload a .zip (BEIR folder) or a .json (HotpotQA) file.")
        if upload.size and upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"The file is larger than {MAX_UPLOAD_BYTES:,} bytes.")
        return upload


def _policy_formfield(field: Any, **kwargs: Any) -> Any:
    # Django 6 changes a bare host's assumed scheme to https; vLLM servers speak http.
    if field.name == "base_url":
        kwargs["assume_scheme"] = "http"
    return field.formfield(**kwargs)


class PolicyConfigForm(forms.ModelForm):
    """A policy config from the page. The API's serializer checks it again (sampling keys
    and types, the system prompt version, a model for an OpenAI-compatible policy), so the
    page and POST /api/policies/ refuse the same things with the same words."""

    class Meta:
        model = PolicyConfig
        formfield_callback = _policy_formfield
        fields = list(PolicyConfig.EDITABLE_FIELDS)
        labels = {
            "base_url": "Base URL",
            "sampling": "Sampling",
            "system_prompt_version": "System prompt version",
            "context_limit": "Context limit (tokens)",
        }
        help_texts = {
            "base_url": "The OpenAI-compatible server; blank: the configured vLLM server.",
            "model": "The model name the server serves; needed for an OpenAI-compatible policy.",
            "sampling": 'JSON, e.g. {"temperature": 0.7, "top_p": 0.95, "max_tokens": 2048}.',
            "context_limit": "The prompt cap in tokens; blank: 30,720 (rerender) or 32,768 "
            "(append).",
            "retriever": "What search_corpus ranks with; dense and hybrid need the dense extra "
            "on the rollout workers.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["base_url"].widget.attrs["placeholder"] = settings.VLLM_BASE_URL
        self.fields["sampling"].initial = dict

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # Imported here: the serializers module imports this one for the upload limits.
        from harness_app.serializers import PolicyConfigSerializer

        checked = PolicyConfigSerializer(data=dict(cleaned))
        if not checked.is_valid():
            for name, errors in checked.errors.items():
                target = None if name == "non_field_errors" else name
                if target is None or (target in self.fields and target not in self.errors):
                    for error in errors:
                        self.add_error(target, str(error))
        return cleaned
