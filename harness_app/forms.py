"""Forms of the harness app's pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from harness_app.models import PolicyConfig
from harness_app.serializers import PolicyConfigSerializer
from harness_app.upload_limits import (
    FORMAT_CHOICES,
    MAX_UPLOAD_BYTES,
    UPLOAD_KINDS,
    UPLOAD_SUFFIXES,
    split_validator,
)


class BenchmarkUploadForm(forms.Form):
    file = forms.FileField(
        help_text="A .zip of a BEIR, BrowseComp-Plus or FRAMES folder, a HotpotQA or "
        "2WikiMultihopQA .json, or a MuSiQue or 2WikiMultihopQA .jsonl file."
    )
    format = forms.ChoiceField(
        choices=FORMAT_CHOICES,
        initial="auto",
        required=False,
        help_text="How to read the file; detected from its layout or first record if not "
        "chosen (docs/corpora.md).",
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

    def clean_format(self) -> str:
        return str(self.cleaned_data.get("format") or "auto")

    def clean_file(self) -> UploadedFile:
        upload: UploadedFile = self.cleaned_data["file"]
        if Path(upload.name or "").suffix.lower() not in UPLOAD_SUFFIXES:
            raise forms.ValidationError(f"Upload {UPLOAD_KINDS}.")
        if upload.size and upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"The file is larger than {MAX_UPLOAD_BYTES:,} bytes.")
        return upload


def _policy_formfield(field: Any, **kwargs: Any) -> Any:
    # Django 6 changes a bare host's assumed scheme to https; vLLM servers speak http.
    if field.name in ("base_url", "verifier_base_url", "reranker_base_url"):
        kwargs["assume_scheme"] = "http"
    return field.formfield(**kwargs)


class PolicyConfigForm(forms.ModelForm):
    """A policy config from the page, new or edited. The API's serializer checks it again
    (sampling keys and types, the system prompt version, a model for an OpenAI-compatible
    policy), so the page and POST /api/policies/ refuse the same things with the same
    words; the view saves it through services/policies.py, never `save()`."""

    class Meta:
        model = PolicyConfig
        formfield_callback = _policy_formfield
        fields = list(PolicyConfig.EDITABLE_FIELDS)
        labels = {
            "base_url": "Base URL",
            "sampling": "Sampling",
            "system_prompt_version": "System prompt version",
            "context_limit": "Context limit (tokens)",
            "verifier_base_url": "Verifier base URL",
            "reranker_base_url": "Reranker base URL",
        }
        help_texts = {
            "base_url": "The OpenAI-compatible server; blank: the configured vLLM server.",
            "model": "The model name the server serves; needed for an OpenAI-compatible policy.",
            "sampling": 'JSON, e.g. {"temperature": 0.7, "top_p": 0.95, "max_tokens": 2048}. '
            'For the rule baseline, {"temperature": 0.2} samples its choices, seeded per '
            "episode (its samples then differ); 0 or none: deterministic.",
            "context_limit": "The prompt cap in tokens; blank: 30,720 (rerender) or 32,768 "
            "(append).",
            "retriever": "What search_corpus ranks with; dense and hybrid need the dense extra "
            "on the rollout workers.",
            "verifier": "Who judges verify calls: term coverage, or a chat model at "
            "temperature 0 (its calls are kept apart from the policy's training data).",
            "verifier_base_url": "The LLM verifier's server; blank: the configured vLLM server.",
            "verifier_model": "The model the verifier's server serves; needed for the LLM "
            "verifier.",
            "reranker_base_url": "A server with vLLM's /rerank or /score API; blank: the "
            "configured vLLM server.",
            "reranker_model": "A reranking (cross-encoder) model; blank: no reranking.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("base_url", "verifier_base_url", "reranker_base_url"):
            self.fields[name].widget.attrs["placeholder"] = settings.VLLM_BASE_URL
        self.fields["sampling"].initial = dict

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # An edit is checked against the stored row, so its own name is not "taken".
        instance = self.instance if self.instance.pk else None
        checked = PolicyConfigSerializer(instance, data=dict(cleaned))
        if not checked.is_valid():
            for name, errors in checked.errors.items():
                target = None if name == "non_field_errors" else name
                if target is None or (target in self.fields and target not in self.errors):
                    for error in errors:
                        self.add_error(target, str(error))
        return cleaned
