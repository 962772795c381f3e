"""What an SFT job may be asked to do: its settings and their bounds.

`SFTJobSettings` mirrors the trainer's `training.sft_train.SFTSettings` field for field, so
the web process can check a request without importing the trainer (and torch); the
training worker builds the trainer's settings from the job's row. `check` refuses what a
job could not run with an SFTJobError that names the setting, which the launch form and
the API show on that field. Defaults follow Harness-1: LoRA rank 32, 3 epochs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from training.services.rl_job_settings import LORA_TARGETS_ALL_LINEAR, MAX_LORA_RANK

MAX_EPOCHS = 100
MAX_LENGTH = 131_072
MAX_BATCH = 1024


class SFTJobError(ValueError):
    """An SFT job request that cannot run; the message names the setting and the fix.

    `field` is the sft_job_create argument or SFTJobSettings field refused, or None when
    no single setting is at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SFTJobSettings:
    lora_rank: int = 32
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS_ALL_LINEAR))
    learning_rate: float = 1e-4
    epochs: float = 3.0
    max_length: int = 4096  # tokens per record; longer records are truncated
    batch_size: int = 1
    grad_accum: int = 1
    eval_fraction: float = 0.1  # held-out share of the episodes, split by episode
    seed: int = 0
    gradient_checkpointing: bool | None = None  # None: on for CUDA, off on the CPU
    save_steps: int = 50
    eval_steps: int = 10

    def check(self) -> None:
        _in_range("lora_rank", self.lora_rank, 1, MAX_LORA_RANK)
        _in_range("lora_alpha", self.lora_alpha, 1, 4 * MAX_LORA_RANK)
        _fraction("lora_dropout", self.lora_dropout)
        _check_targets(self.lora_targets)
        if not (math.isfinite(self.learning_rate) and 0 < self.learning_rate <= 1):
            raise SFTJobError(
                f"learning_rate must be in (0, 1], got {self.learning_rate}",
                field="learning_rate",
            )
        if not (math.isfinite(self.epochs) and 0 < self.epochs <= MAX_EPOCHS):
            raise SFTJobError(
                f"epochs must be in (0, {MAX_EPOCHS}], got {self.epochs}", field="epochs"
            )
        _in_range("max_length", self.max_length, 16, MAX_LENGTH)
        _in_range("batch_size", self.batch_size, 1, MAX_BATCH)
        _in_range("grad_accum", self.grad_accum, 1, MAX_BATCH)
        _fraction("eval_fraction", self.eval_fraction)
        _in_range("seed", self.seed, 0, 2**31 - 1)
        _in_range("save_steps", self.save_steps, 1, 1_000_000)
        _in_range("eval_steps", self.eval_steps, 1, 1_000_000)

    def as_fields(self) -> dict[str, Any]:
        """The SFTJob fields these settings fill."""
        return asdict(self)


def sft_settings_from(data: Mapping[str, Any]) -> SFTJobSettings:
    """Settings from a form's or serializer's cleaned data (unknown keys and None ignored,
    so a blank field keeps its default)."""
    known = SFTJobSettings.__dataclass_fields__
    values = {k: v for k, v in data.items() if k in known and v is not None}
    if "gradient_checkpointing" in data:
        values["gradient_checkpointing"] = data["gradient_checkpointing"]
    return SFTJobSettings(**values)


def _in_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SFTJobError(f"{name} must be between {low} and {high}, got {value}", field=name)


def _fraction(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0 <= value < 1):
        raise SFTJobError(f"{name} must be in [0, 1), got {value}", field=name)


def _check_targets(targets: Any) -> None:
    if (
        not isinstance(targets, list | tuple)
        or not targets
        or not all(isinstance(t, str) and t.isidentifier() for t in targets)
    ):
        raise SFTJobError(
            "lora_targets must be a non-empty list of module names such as "
            f"{list(LORA_TARGETS_ALL_LINEAR)}, got {targets!r}",
            field="lora_targets",
        )
    if len(set(targets)) != len(targets):
        raise SFTJobError(f"lora_targets repeats a module: {list(targets)}", field="lora_targets")
