"""The RL and SFT job launch forms. The bounds live in the services (RLJobSettings.check,
SFTJobSettings.check and the set-up checks), whose errors name the field they refuse; the
views show them there."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from harness_app.harness.reward import PRESET_KEY
from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from training.models import (
    ExportFormat,
    ExportStatus,
    Reconstruction,
    RLAlgorithm,
    RLMode,
    SFTExport,
    SFTJob,
    SFTJobStatus,
)
from training.services.rl_job_settings import (
    MAX_GROUP_SIZE,
    MAX_LORA_RANK,
    MAX_STEPS,
    MAX_SUBSTEPS,
    PRESETS,
    RLJobSettings,
)
from training.services.sft_job_settings import (
    SFTJobSettings,
    sft_lora_alpha_default,
    sft_lora_rank_default,
)
from trajectories.episode_filters import EpisodeFilterError, episode_filters_clean
from trajectories.models import AnnotationStatus, TerminationPolicy

DEFAULTS = RLJobSettings()
CHECKPOINTING_CHOICES = [("", "auto: on for CUDA, off on the CPU"), ("on", "on"), ("off", "off")]


def _checkpointing(value: str) -> bool | None:
    return {"on": True, "off": False}.get(value)


class RLJobLaunchForm(forms.Form):
    """With a preset, the preset fills every setting left at its default here; a field
    changed from its default overrides the preset (the view passes `changed_data`)."""

    name = forms.CharField(
        required=False, max_length=200, label="Name", help_text="Optional; blank: RL job N."
    )
    preset = forms.ChoiceField(
        required=False,
        choices=[("", "none: the settings below"), *((p, p) for p in sorted(PRESETS))],
        help_text="harness1_gpu: Harness-1's recipe for a GPU (128 queries × 8 rollouts, "
        "4 substeps, lr 1e-5, LoRA rank 32 on every linear layer, temperature 1, 2,048 "
        "tokens per turn, 40 turns). Settings you change below override it.",
        label="Preset",
    )
    benchmark = forms.ModelChoiceField(
        Benchmark.objects.order_by("name"),
        label="Benchmark",
        help_text="The queries the rollouts answer; each step samples from them.",
    )
    warm_start = forms.ModelChoiceField(
        SFTJob.objects.filter(status=SFTJobStatus.COMPLETED, policy__isnull=False).order_by("-pk"),
        required=False,
        empty_label="none: a fresh adapter on the base policy",
        help_text="Start from a completed SFT job's adapter: its policy becomes the base "
        "policy, its weights folder the base weights, and its LoRA rank and targets replace "
        "the ones below.",
        label="Warm start (SFT job)",
    )
    base_policy = forms.ModelChoiceField(
        PolicyConfig.objects.filter(kind=PolicyKind.OPENAI).order_by("name"),
        required=False,
        help_text="An OpenAI-compatible policy: its vLLM server samples the rollouts and "
        "serves each new adapter (started with --enable-lora). Not needed with a warm start.",
        label="Base policy",
    )
    base_model_dir = forms.CharField(
        max_length=500,
        initial=lambda: settings.RL_BASE_MODEL_DIR,
        help_text="The local folder of the weights that server serves; the trainer loads it.",
        label="Base weights folder",
    )
    steps = forms.IntegerField(
        initial=DEFAULTS.steps,
        widget=forms.NumberInput({"min": 1, "max": MAX_STEPS}),
        label="Steps",
        help_text="Training steps: each rolls out a batch, then updates the adapter.",
    )
    group_size = forms.IntegerField(
        initial=DEFAULTS.group_size,
        help_text="G: samples per query; advantages are relative to the group.",
        widget=forms.NumberInput({"min": 2, "max": MAX_GROUP_SIZE}),
        label="Group size (G)",
    )
    queries_per_step = forms.IntegerField(
        initial=DEFAULTS.queries_per_step,
        label="Queries per step",
        help_text="Queries sampled per step; each gets G rollouts.",
    )
    algorithm = forms.ChoiceField(
        choices=RLAlgorithm.choices,
        initial=DEFAULTS.algorithm,
        label="Algorithm",
        help_text="CISPO (Harness-1) or GRPO: how the policy loss weights each token.",
    )
    learning_rate = forms.FloatField(
        initial=DEFAULTS.learning_rate,
        label="Learning rate",
        help_text="The optimiser's step size (Harness-1: 1e-5).",
    )
    lora_rank = forms.IntegerField(
        initial=DEFAULTS.lora_rank,
        help_text="At most the server's --max-lora-rank.",
        widget=forms.NumberInput({"min": 1, "max": MAX_LORA_RANK}),
        label="LoRA rank",
    )
    lora_targets = forms.CharField(
        required=False,
        initial=", ".join(DEFAULTS.lora_targets),
        help_text="Module names LoRA adapts, comma-separated (e.g. q_proj, k_proj, v_proj, "
        "o_proj, gate_proj, up_proj, down_proj).",
        label="LoRA target modules",
    )
    substeps = forms.IntegerField(
        required=False,
        initial=DEFAULTS.substeps,
        help_text="Optimiser steps per batch: the batch is split into this many minibatches.",
        widget=forms.NumberInput({"min": 1, "max": MAX_SUBSTEPS}),
        label="Optimiser substeps",
    )
    reconstruction = forms.ChoiceField(
        required=False,
        choices=Reconstruction.choices,
        initial=DEFAULTS.reconstruction,
        help_text="How an episode's model calls become training sequences: merged by prefix "
        "into one per chain, or one per call (the shared prefix processed again each time).",
        label="Reconstruction",
    )
    tokens_per_turn = forms.IntegerField(
        required=False,
        help_text="max_tokens of each model call in the job's rollouts; blank: the policy's.",
        label="Tokens per turn",
    )
    temperature = forms.FloatField(
        required=False,
        help_text="Rollout sampling temperature; blank: the policy's.",
        label="Temperature",
    )
    max_sequence_tokens = forms.IntegerField(
        required=False,
        help_text="Trajectories longer than this (prompt + response tokens) are left out of "
        "training and counted in the step's metrics; blank: no cap.",
        label="Max sequence tokens",
    )
    gradient_checkpointing = forms.TypedChoiceField(
        required=False,
        choices=CHECKPOINTING_CHOICES,
        coerce=_checkpointing,
        empty_value=None,
        help_text="Activation checkpointing: recompute activations in backward to fit long "
        "sequences.",
        label="Gradient checkpointing",
    )
    cispo_eps_low = forms.FloatField(
        initial=DEFAULTS.cispo_eps_low,
        help_text="CISPO clips its weight to [1 − low, 1 + high].",
        label="CISPO ε low",
    )
    cispo_eps_high = forms.FloatField(
        initial=DEFAULTS.cispo_eps_high,
        label="CISPO ε high",
        help_text="The upper clip of CISPO's weight, 1 + high.",
    )
    grpo_eps = forms.FloatField(
        initial=DEFAULTS.grpo_eps, help_text="GRPO's ratio clip, 1 ± ε.", label="GRPO ε"
    )
    kl_beta = forms.FloatField(
        initial=DEFAULTS.kl_beta,
        help_text="KL penalty toward the base policy; Harness-1: 0.005.",
        label="KL β",
    )
    normalize_std = forms.BooleanField(
        required=False,
        help_text="Divide advantages by the group's std (GRPO); off in Harness-1.",
        label="Normalise by group std",
    )
    max_turns = forms.IntegerField(
        initial=DEFAULTS.max_turns,
        label="Max turns",
        help_text="Turns per rollout before the episode is cut off.",
    )
    termination_policy = forms.ChoiceField(
        choices=TerminationPolicy.choices,
        initial=DEFAULTS.termination_policy,
        label="Termination policy",
        help_text="What ends a rollout besides end_search and the turn limit.",
    )
    mode = forms.ChoiceField(
        required=False,
        choices=RLMode.choices,
        initial=DEFAULTS.mode,
        help_text="Async overlaps a step's training with the next step's rollouts, which "
        "then sample from the version before (at most one version stale).",
        label="Mode",
    )
    reward_weights = forms.JSONField(
        required=False,
        initial=dict,
        help_text=(
            'Reward weights: a preset name ("harness1", "default", "library_default"), '
            'or overrides, e.g. {"preset": "harness1", "turn_penalty": 0.05}.'
        ),
        label="Reward weights",
    )

    def clean_mode(self) -> str:
        return str(self.cleaned_data.get("mode") or DEFAULTS.mode)

    def clean_reconstruction(self) -> str:
        return str(self.cleaned_data.get("reconstruction") or DEFAULTS.reconstruction)

    def clean_lora_targets(self) -> list[str] | None:
        """A comma-separated list; blank leaves the default (or the preset's)."""
        value = self.cleaned_data.get("lora_targets") or ""
        return [part.strip() for part in value.split(",") if part.strip()] or None

    def clean_reward_weights(self) -> dict[str, Any]:
        """A bare preset name becomes {"preset": name}; the job checks the name."""
        value = self.cleaned_data.get("reward_weights")
        if isinstance(value, str):
            return {PRESET_KEY: value}
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("give a JSON object or a preset name")
        return value


SFT_DEFAULTS = SFTJobSettings()


class SFTJobLaunchForm(forms.Form):
    """An SFT job: an export to train on, the policy whose server serves the adapter, and
    the trainer's settings with Harness-1's defaults (3 epochs; LoRA rank 32, or what the
    configured vLLM server loads if that is less)."""

    name = forms.CharField(
        required=False, max_length=200, label="Name", help_text="Optional; blank: SFT job N."
    )
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
    base_model_dir = forms.CharField(
        max_length=500,
        initial=lambda: settings.RL_BASE_MODEL_DIR,
        help_text="The local folder of the weights that server serves; the trainer loads it.",
        label="Base weights folder",
    )
    epochs = forms.FloatField(
        initial=SFT_DEFAULTS.epochs,
        label="Epochs",
        help_text="Passes over the training records; fractions allowed.",
    )
    learning_rate = forms.FloatField(
        initial=SFT_DEFAULTS.learning_rate,
        label="Learning rate",
        help_text="The optimiser's step size.",
    )
    lora_rank = forms.IntegerField(
        initial=sft_lora_rank_default,  # called when drawn: LLM_MAX_LORA_RANK may change
        widget=forms.NumberInput({"min": 1, "max": MAX_LORA_RANK}),
        label="LoRA rank",
    )
    lora_alpha = forms.IntegerField(
        initial=sft_lora_alpha_default,
        label="LoRA α",
        help_text="LoRA's scale: the update is multiplied by α / rank.",
    )
    lora_dropout = forms.FloatField(
        initial=SFT_DEFAULTS.lora_dropout,
        label="LoRA dropout",
        help_text="Dropout on the LoRA input during training.",
    )
    lora_targets = forms.CharField(
        required=False,
        initial=", ".join(SFT_DEFAULTS.lora_targets),
        help_text="Module names LoRA adapts, comma-separated; blank: every linear layer.",
        label="LoRA target modules",
    )
    max_length = forms.IntegerField(
        initial=SFT_DEFAULTS.max_length,
        help_text="Tokens per record; longer records are truncated (and counted).",
        label="Max record length (tokens)",
    )
    batch_size = forms.IntegerField(
        initial=SFT_DEFAULTS.batch_size, label="Batch size", help_text="Records per forward pass."
    )
    grad_accum = forms.IntegerField(
        initial=SFT_DEFAULTS.grad_accum,
        help_text="Batches per optimiser step.",
        label="Gradient accumulation",
    )
    eval_fraction = forms.FloatField(
        initial=SFT_DEFAULTS.eval_fraction,
        help_text="Share of the episodes held out for the eval loss (split by episode).",
        label="Eval fraction",
    )
    eval_steps = forms.IntegerField(
        initial=SFT_DEFAULTS.eval_steps,
        help_text="The eval loss every N optimiser steps.",
        label="Eval every (steps)",
    )
    save_steps = forms.IntegerField(
        initial=SFT_DEFAULTS.save_steps,
        help_text="A checkpoint every N optimiser steps (and at the end, or on cancel).",
        label="Checkpoint every (steps)",
    )
    seed = forms.IntegerField(
        initial=SFT_DEFAULTS.seed,
        label="Seed",
        help_text="Seeds the split, the shuffling and the adapter's initial weights.",
    )
    gradient_checkpointing = forms.TypedChoiceField(
        required=False,
        choices=CHECKPOINTING_CHOICES,
        coerce=_checkpointing,
        empty_value=None,
        help_text="Activation checkpointing: recompute activations in backward to fit long "
        "records.",
        label="Gradient checkpointing",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        server_max = settings.LLM_MAX_LORA_RANK
        self.fields["lora_rank"].help_text = (
            f"At most the server's --max-lora-rank {server_max} (LLM_MAX_LORA_RANK; "
            "scripts/llm/serve.sh starts the CPU server at 16), or the trained adapter is "
            f"refused when it is published. Hence the default: Harness-1's "
            f"{SFT_DEFAULTS.lora_rank}, or {server_max} if the server loads no more."
        )

    def clean_lora_targets(self) -> list[str] | None:
        """A comma-separated list; blank leaves the default."""
        value = self.cleaned_data.get("lora_targets") or ""
        return [part.strip() for part in value.split(",") if part.strip()] or None


# The export form's own filter fields; any other filter goes in `more_filters`.
EXPORT_FILTER_FIELDS = ("ids", "batch", "policy", "benchmark", "annotation_status")


class SFTExportCreateForm(forms.Form):
    """The options of POST /api/exports/. The filters are checked by the same function the
    service and the API use (episode_filters_clean), and an error lands on the field that
    holds the bad filter."""

    ids = forms.CharField(
        required=False,
        label="Episodes",
        help_text="Episode ids, comma-separated (the episode list's Export action fills them).",
    )
    batch = forms.IntegerField(required=False, label="Batch id", min_value=1)
    policy = forms.ModelChoiceField(
        PolicyConfig.objects.order_by("name"), required=False, empty_label="any policy"
    )
    benchmark = forms.ModelChoiceField(
        Benchmark.objects.order_by("name"), required=False, empty_label="any benchmark"
    )
    annotation_status = forms.ChoiceField(
        required=False,
        choices=[("", "approved only, unless episodes are chosen"), *AnnotationStatus.choices],
        label="Annotation status",
        help_text="Without one, only approved episodes are exported; episodes chosen by id "
        "are exported whatever their label. The count below shows what each filter leaves.",
    )
    more_filters = forms.JSONField(
        required=False,
        initial=dict,  # shown as {} rather than null
        label="More filters (JSON)",
        help_text='Any other episode filter, as for /api/episodes/, e.g. {"status": '
        '"completed", "reward_min": 0.5}.',
    )
    fmt = forms.ChoiceField(choices=ExportFormat.choices, initial=ExportFormat.CHAT, label="Format")
    reconstruction = forms.ChoiceField(
        choices=Reconstruction.choices,
        initial=Reconstruction.PREFIX_MERGE,
        help_text="How an episode's model calls become records: one per chain, or one per call.",
    )

    def clean_more_filters(self) -> dict[str, Any]:
        value = self.cleaned_data.get("more_filters")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError('give a JSON object, e.g. {"status": "completed"}')
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        raw = dict(cleaned.get("more_filters") or {})
        for name in EXPORT_FILTER_FIELDS:
            value = cleaned.get(name)
            if value not in (None, ""):
                raw[name] = getattr(value, "pk", value)
        try:
            cleaned["filters"] = episode_filters_clean(raw)
        except EpisodeFilterError as exc:
            self.add_error(exc.key if exc.key in EXPORT_FILTER_FIELDS else "more_filters", str(exc))
        return cleaned
