"""The RL job launch form. The bounds live in training.services.rl_jobs (RLJobSettings.check
and the set-up checks), whose RLJobError names the field it refuses; the view shows it there."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from harness_app.harness.reward import PRESET_KEY
from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from training.models import RLAlgorithm
from training.services.rl_jobs import MAX_GROUP_SIZE, MAX_LORA_RANK, MAX_STEPS, RLJobSettings
from trajectories.models import TerminationPolicy

DEFAULTS = RLJobSettings()


class RLJobLaunchForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    benchmark = forms.ModelChoiceField(Benchmark.objects.order_by("name"))
    base_policy = forms.ModelChoiceField(
        PolicyConfig.objects.filter(kind=PolicyKind.OPENAI).order_by("name"),
        help_text="An OpenAI-compatible policy: its vLLM server samples the rollouts and "
        "serves each new adapter (started with --enable-lora).",
    )
    base_model_dir = forms.CharField(
        max_length=500,
        initial=lambda: settings.RL_BASE_MODEL_DIR,
        help_text="The local folder of the weights that server serves; the trainer loads it.",
    )
    steps = forms.IntegerField(
        initial=DEFAULTS.steps, widget=forms.NumberInput({"min": 1, "max": MAX_STEPS})
    )
    group_size = forms.IntegerField(
        initial=DEFAULTS.group_size,
        help_text="G: samples per query; advantages are relative to the group.",
        widget=forms.NumberInput({"min": 2, "max": MAX_GROUP_SIZE}),
    )
    queries_per_step = forms.IntegerField(initial=DEFAULTS.queries_per_step)
    algorithm = forms.ChoiceField(choices=RLAlgorithm.choices, initial=DEFAULTS.algorithm)
    learning_rate = forms.FloatField(initial=DEFAULTS.learning_rate)
    lora_rank = forms.IntegerField(
        initial=DEFAULTS.lora_rank,
        help_text="At most the server's --max-lora-rank.",
        widget=forms.NumberInput({"min": 1, "max": MAX_LORA_RANK}),
    )
    cispo_eps_low = forms.FloatField(
        initial=DEFAULTS.cispo_eps_low, help_text="CISPO clips its weight to [1 − low, 1 + high]."
    )
    cispo_eps_high = forms.FloatField(initial=DEFAULTS.cispo_eps_high)
    grpo_eps = forms.FloatField(initial=DEFAULTS.grpo_eps, help_text="GRPO's ratio clip, 1 ± ε.")
    kl_beta = forms.FloatField(
        initial=DEFAULTS.kl_beta, help_text="KL penalty toward the base policy; Harness-1: 0.005."
    )
    normalize_std = forms.BooleanField(
        required=False, help_text="Divide advantages by the group's std (GRPO); off in Harness-1."
    )
    max_turns = forms.IntegerField(initial=DEFAULTS.max_turns)
    termination_policy = forms.ChoiceField(
        choices=TerminationPolicy.choices, initial=DEFAULTS.termination_policy
    )
    reward_weights = forms.JSONField(
        required=False,
        initial=dict,
        help_text=(
            'Reward weights: a preset name ("harness1", "default", "library_default"), '
            'or overrides, e.g. {"preset": "harness1", "turn_penalty": 0.05}.'
        ),
    )

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
