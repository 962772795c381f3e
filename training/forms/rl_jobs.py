"""The RL job launch form. With a preset, the preset fills every setting left at its
default here; a field changed from its default overrides the preset (the view passes
`changed_data`)."""

from __future__ import annotations

from typing import Any

from django import forms

from harness_app.harness.reward import PRESET_KEY
from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from training.forms.jobs import TrainingJobLaunchForm
from training.models import JobStatus, Reconstruction, RLAlgorithm, RLMode, SFTJob
from training.rl.settings import (
    MAX_GROUP_SIZE,
    MAX_LORA_RANK,
    MAX_STEPS,
    MAX_SUBSTEPS,
    PRESETS,
    RLJobSettings,
)
from trajectories.models import TerminationPolicy

DEFAULTS = RLJobSettings()

LABELS = {
    "steps": "Steps",
    "group_size": "Group size (G)",
    "queries_per_step": "Queries per step",
    "learning_rate": "Learning rate",
    "lora_rank": "LoRA rank",
    "substeps": "Optimiser substeps",
    "tokens_per_turn": "Tokens per turn",
    "temperature": "Temperature",
    "max_sequence_tokens": "Max sequence tokens",
    "cispo_eps_low": "CISPO ε low",
    "cispo_eps_high": "CISPO ε high",
    "grpo_eps": "GRPO ε",
    "kl_beta": "KL β",
    "normalize_std": "Normalise by group std",
    "max_turns": "Max turns",
}
HELP_TEXTS = {
    "steps": "Training steps: each rolls out a batch, then updates the adapter.",
    "group_size": "G: samples per query; advantages are relative to the group.",
    "queries_per_step": "Queries sampled per step; each gets G rollouts.",
    "learning_rate": "The optimiser's step size (Harness-1: 1e-5).",
    "lora_rank": "At most the server's --max-lora-rank.",
    "lora_targets": "Module names LoRA adapts, comma-separated (e.g. q_proj, k_proj, v_proj, "
    "o_proj, gate_proj, up_proj, down_proj).",
    "substeps": "Optimiser steps per batch: the batch is split into this many minibatches.",
    "tokens_per_turn": "max_tokens of each model call in the job's rollouts; blank: the policy's.",
    "temperature": "Rollout sampling temperature; blank: the policy's.",
    "max_sequence_tokens": "Trajectories longer than this (prompt + response tokens) are left "
    "out of training and counted in the step's metrics; blank: no cap.",
    "gradient_checkpointing": "Activation checkpointing: recompute activations in backward to "
    "fit long sequences.",
    "cispo_eps_low": "CISPO clips its weight to [1 − low, 1 + high].",
    "cispo_eps_high": "The upper clip of CISPO's weight, 1 + high.",
    "grpo_eps": "GRPO's ratio clip, 1 ± ε.",
    "kl_beta": "KL penalty toward the base policy; Harness-1: 0.005.",
    "normalize_std": "Divide advantages by the group's std (GRPO); off in Harness-1.",
    "max_turns": "Turns per rollout before the episode is cut off.",
}


class RLJobLaunchForm(TrainingJobLaunchForm):
    """With a preset, the preset fills every setting left at its default here; a field
    changed from its default overrides the preset (the view passes `changed_data`)."""

    kind_label = "RL job"
    defaults = DEFAULTS
    setting_fields = (
        "steps", "group_size", "queries_per_step", "learning_rate", "lora_rank", "substeps",
        "tokens_per_turn", "temperature", "max_sequence_tokens", "cispo_eps_low",
        "cispo_eps_high", "grpo_eps", "kl_beta", "normalize_std", "max_turns",
    )  # fmt: skip
    labels = LABELS
    help_texts = HELP_TEXTS
    bounds = {
        "steps": (1, MAX_STEPS),
        "group_size": (2, MAX_GROUP_SIZE),
        "lora_rank": (1, MAX_LORA_RANK),
        "substeps": (1, MAX_SUBSTEPS),
    }
    optional = frozenset({"substeps"})
    field_order = [
        "name", "preset", "benchmark", "warm_start", "base_policy", "base_model_dir", "steps",
        "group_size", "queries_per_step", "algorithm", "learning_rate", "lora_rank",
        "lora_targets", "substeps", "reconstruction", "tokens_per_turn", "temperature",
        "max_sequence_tokens", "gradient_checkpointing", "cispo_eps_low", "cispo_eps_high",
        "grpo_eps", "kl_beta", "normalize_std", "max_turns", "termination_policy", "mode",
        "reward_weights",
    ]  # fmt: skip

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
        SFTJob.objects.filter(status=JobStatus.COMPLETED, policy__isnull=False).order_by("-pk"),
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
    algorithm = forms.ChoiceField(
        choices=RLAlgorithm.choices,
        initial=DEFAULTS.algorithm,
        label="Algorithm",
        help_text="CISPO (Harness-1) or GRPO: how the policy loss weights each token.",
    )
    reconstruction = forms.ChoiceField(
        required=False,
        choices=Reconstruction.choices,
        initial=DEFAULTS.reconstruction,
        help_text="How an episode's model calls become training sequences: merged by prefix "
        "into one per chain, or one per call (the shared prefix processed again each time).",
        label="Reconstruction",
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
