"""What an RL job may be asked to do: its settings, their bounds, and the named presets.

`RLJobSettings.check` refuses anything a job could not run with an RLJobError that names
the setting; the launch form and the API show it on that field. No torch here: the web
process imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_app.harness.llm.reconstruct import PREFIX_MERGE, strategy_clean
from harness_app.harness.reward import RewardWeights
from training.lora import LORA_TARGETS_ALL_LINEAR, LORA_TARGETS_DEFAULT, MAX_LORA_RANK
from training.models import RLAlgorithm, RLMode
from training.services.jobs import TrainingJobError
from trajectories.models import TerminationPolicy
from trajectories.services import rollouts

MAX_GROUP_SIZE = 64
MAX_STEPS = 10_000
MAX_SUBSTEPS = 64
MAX_TOKENS_PER_TURN = 32_768
MAX_SEQUENCE_TOKENS = 1_000_000


class RLJobError(TrainingJobError):
    """An RL job request that cannot run (TrainingJobError: `field` names the setting)."""


@dataclass(frozen=True)
class RLJobSettings:
    """What a job is asked to do; `check` refuses anything it could not run."""

    group_size: int = 4
    queries_per_step: int = 4
    steps: int = 2
    algorithm: str = RLAlgorithm.CISPO
    cispo_eps_low: float = 1.0
    cispo_eps_high: float = 4.0
    grpo_eps: float = 0.2
    learning_rate: float = 1e-5
    lora_rank: int = 8
    kl_beta: float = 0.0
    normalize_std: bool = False
    reward_weights: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 8
    termination_policy: str = TerminationPolicy.MAX_TURNS
    substeps: int = 1  # optimiser steps per batch, one per minibatch
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS_DEFAULT))
    # Sampling of the job's rollouts; None keeps the base policy's own.
    tokens_per_turn: int | None = None  # max_tokens of each model call
    temperature: float | None = None
    max_sequence_tokens: int | None = None  # longer trajectories are dropped from training
    gradient_checkpointing: bool | None = None  # None: on for CUDA, off on the CPU
    preset: str = ""  # the named preset the settings started from, if any
    # How each episode's model calls become sequences: one per chain (prefix_merge) or one
    # per call (per_request); "prefix" and "request" are accepted and stored canonical.
    reconstruction: str = PREFIX_MERGE
    # sync: each step samples from the newest version; async: step n+1's rollouts start
    # (on the version step n sampled) when step n's training starts (docs/training-rl.md).
    mode: str = RLMode.SYNC

    def check(self) -> None:
        try:
            strategy_clean(self.reconstruction, field="reconstruction")
        except ValueError as exc:
            raise RLJobError(str(exc), field="reconstruction") from None
        if self.mode not in RLMode.values:
            raise RLJobError(f"mode {self.mode!r} is not one of {RLMode.values}", field="mode")
        _in_range("group_size", self.group_size, 2, MAX_GROUP_SIZE)
        _in_range("substeps", self.substeps, 1, MAX_SUBSTEPS)
        if self.tokens_per_turn is not None:
            _in_range("tokens_per_turn", self.tokens_per_turn, 1, MAX_TOKENS_PER_TURN)
        if self.max_sequence_tokens is not None:
            _in_range("max_sequence_tokens", self.max_sequence_tokens, 2, MAX_SEQUENCE_TOKENS)
        if self.temperature is not None and not (
            math.isfinite(self.temperature) and 0 <= self.temperature <= 2
        ):
            raise RLJobError(
                f"temperature must be between 0 and 2, got {self.temperature}",
                field="temperature",
            )
        if self.preset and self.preset not in PRESETS:
            raise RLJobError(
                f"preset {self.preset!r} is not one of {sorted(PRESETS)}", field="preset"
            )
        _check_lora_targets(self.lora_targets)
        _in_range("queries_per_step", self.queries_per_step, 1, 10_000)
        _in_range("steps", self.steps, 1, MAX_STEPS)
        _in_range("lora_rank", self.lora_rank, 1, MAX_LORA_RANK)
        _in_range("max_turns", self.max_turns, 1, rollouts.MAX_TURNS_LIMIT)
        if self.algorithm not in RLAlgorithm.values:
            raise RLJobError(
                f"algorithm {self.algorithm!r} is not one of {RLAlgorithm.values}",
                field="algorithm",
            )
        if self.termination_policy not in TerminationPolicy.values:
            raise RLJobError(
                f"termination_policy {self.termination_policy!r} is not one of "
                f"{TerminationPolicy.values}",
                field="termination_policy",
            )
        if not (0 < self.learning_rate <= 1):
            raise RLJobError(
                f"learning_rate must be in (0, 1], got {self.learning_rate}",
                field="learning_rate",
            )
        for name in ("cispo_eps_low", "cispo_eps_high", "grpo_eps", "kl_beta"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise RLJobError(f"{name} must be a finite number >= 0, got {value}", field=name)
        try:
            RewardWeights.from_json(self.reward_weights)
        except (TypeError, ValueError) as exc:
            raise RLJobError(f"reward_weights: {exc}", field="reward_weights") from exc


# Named recipes; a job started from one records its name, and any setting given beside
# the name overrides the preset's value.
PRESETS: dict[str, dict[str, Any]] = {
    # Harness-1's RL recipe, for a GPU (docs/training-rl.md): 128 queries × 8 rollouts,
    # 4 substeps, lr 1e-5, LoRA rank 32 (on every linear layer: the paper names no
    # targets), temperature 1, 2,048 tokens per turn, 40 turns.
    "harness1_gpu": {
        "queries_per_step": 128,
        "group_size": 8,
        "substeps": 4,
        "learning_rate": 1e-5,
        "lora_rank": 32,
        "lora_targets": list(LORA_TARGETS_ALL_LINEAR),
        "temperature": 1.0,
        "tokens_per_turn": 2048,
        "max_turns": 40,
        "algorithm": RLAlgorithm.CISPO,
    },
}


def _check_lora_targets(targets: Any) -> None:
    if (
        not isinstance(targets, list | tuple)
        or not targets
        or not all(isinstance(t, str) and t.isidentifier() for t in targets)
    ):
        raise RLJobError(
            f"lora_targets must be a non-empty list of module names such as "
            f"{list(LORA_TARGETS_DEFAULT)}, got {targets!r}",
            field="lora_targets",
        )
    if len(set(targets)) != len(targets):
        raise RLJobError(f"lora_targets repeats a module: {list(targets)}", field="lora_targets")


def _in_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise RLJobError(f"{name} must be between {low} and {high}, got {value}", field=name)


def job_settings_from(
    data: Mapping[str, Any], *, given: Collection[str] | None = None
) -> RLJobSettings:
    """Settings from a form's or serializer's cleaned data (unknown keys ignored).

    With a `preset` in `data`, the preset's values fill the settings first; then only the
    keys in `given` (what the request set itself; every key when None) override them."""
    known = RLJobSettings.__dataclass_fields__
    values = {k: v for k, v in data.items() if k in known and v is not None}
    preset = values.get("preset") or ""
    if not preset:
        return RLJobSettings(**values)
    if preset not in PRESETS:
        raise RLJobError(f"preset {preset!r} is not one of {sorted(PRESETS)}", field="preset")
    chosen = {k: v for k, v in values.items() if given is None or k in given}
    return RLJobSettings(**{**PRESETS[preset], **chosen, "preset": preset})
