"""The SFT job launch form: an export to train on, the policy whose server serves the
adapter, and the trainer's settings with Harness-1's defaults (3 epochs; LoRA rank 32, or
what the configured vLLM server loads if that is less)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from harness_app.models import PolicyConfig, PolicyKind
from training.forms.jobs import TrainingJobLaunchForm
from training.lora import MAX_LORA_RANK
from training.models import ExportStatus, SFTExport
from training.sft.settings import (
    SFTJobSettings,
    sft_lora_alpha_default,
    sft_lora_rank_default,
)

DEFAULTS = SFTJobSettings()

LABELS = {
    "epochs": "Epochs",
    "learning_rate": "Learning rate",
    "lora_rank": "LoRA rank",
    "lora_alpha": "LoRA α",
    "lora_dropout": "LoRA dropout",
    "max_length": "Max record length (tokens)",
    "batch_size": "Batch size",
    "grad_accum": "Gradient accumulation",
    "eval_fraction": "Eval fraction",
    "eval_steps": "Eval every (steps)",
    "save_steps": "Checkpoint every (steps)",
    "seed": "Seed",
}
HELP_TEXTS = {
    "epochs": "Passes over the training records; fractions allowed.",
    "learning_rate": "The optimiser's step size.",
    "lora_alpha": "LoRA's scale: the update is multiplied by α / rank.",
    "lora_dropout": "Dropout on the LoRA input during training.",
    "lora_targets": "Module names LoRA adapts, comma-separated; blank: every linear layer.",
    "max_length": "Tokens per record; longer records are truncated (and counted).",
    "batch_size": "Records per forward pass.",
    "grad_accum": "Batches per optimiser step.",
    "eval_fraction": "Share of the episodes held out for the eval loss (split by episode).",
    "eval_steps": "The eval loss every N optimiser steps.",
    "save_steps": "A checkpoint every N optimiser steps (and at the end, or on cancel).",
    "seed": "Seeds the split, the shuffling and the adapter's initial weights.",
    "gradient_checkpointing": "Activation checkpointing: recompute activations in backward to "
    "fit long records.",
}


class SFTJobLaunchForm(TrainingJobLaunchForm):
    """An SFT job: an export to train on, the policy whose server serves the adapter, and
    the trainer's settings with Harness-1's defaults (3 epochs; LoRA rank 32, or what the
    configured vLLM server loads if that is less)."""

    kind_label = "SFT job"
    defaults = DEFAULTS
    setting_fields = (
        "epochs", "learning_rate", "lora_rank", "lora_alpha", "lora_dropout", "max_length",
        "batch_size", "grad_accum", "eval_fraction", "eval_steps", "save_steps", "seed",
    )  # fmt: skip
    labels = LABELS
    help_texts = HELP_TEXTS
    bounds = {"lora_rank": (1, MAX_LORA_RANK)}
    # Called when drawn: LLM_MAX_LORA_RANK may change.
    initials = {"lora_rank": sft_lora_rank_default, "lora_alpha": sft_lora_alpha_default}
    field_order = [
        "name", "export", "base_policy", "base_model_dir", "epochs", "learning_rate",
        "lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "max_length", "batch_size",
        "grad_accum", "eval_fraction", "eval_steps", "save_steps", "seed",
        "gradient_checkpointing",
    ]  # fmt: skip

    export = forms.ModelChoiceField(
        SFTExport.objects.filter(status=ExportStatus.DONE, records__gt=0).order_by("-pk"),
        help_text="A done export of approved episodes; a held-out share of its episodes "
        "gives the eval loss.",
        label="Export",
    )
    base_policy = forms.ModelChoiceField(
        PolicyConfig.objects.filter(kind=PolicyKind.OPENAI).order_by("name"),
        help_text="The student: an OpenAI-compatible policy whose vLLM server (started with "
        "--enable-lora) serves the trained adapter.",
        label="Base policy",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        server_max = settings.LLM_MAX_LORA_RANK
        self.fields["lora_rank"].help_text = (
            f"At most the server's --max-lora-rank {server_max} (LLM_MAX_LORA_RANK; "
            "scripts/llm/serve.sh starts the CPU server at 16), or the trained adapter is "
            f"refused when it is published. Hence the default: Harness-1's "
            f"{DEFAULTS.lora_rank}, or {server_max} if the server loads no more."
        )
