"""What an SFT job may be asked to do: its settings and their bounds.

`SFTJobSettings` holds the trainer's `training.sft.train.SFTSettings` fields as the job's
row and the forms hold them (targets as a list); `check` is the trainer's own check, so a
request is refused by the same rules the trainer applies, with an SFTJobError naming the
setting, which the launch form and the API show on that field. Defaults follow Harness-1:
LoRA rank 32, 3 epochs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from training.lora import LORA_TARGETS_ALL_LINEAR, lora_rank_default
from training.services.jobs import TrainingJobError
from training.sft.train import SFTSettings, SFTSettingsError


class SFTJobError(TrainingJobError):
    """An SFT job request that cannot run (TrainingJobError: `field` names the setting)."""


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
        """The trainer's own check (training.sft.train imports torch only inside its
        functions, so the web process may import it), its error as an SFTJobError."""
        try:
            self.trainer_settings().check()
        except SFTSettingsError as exc:
            raise SFTJobError(str(exc), field=exc.field) from exc

    def trainer_settings(self) -> SFTSettings:
        fields = self.as_fields()
        fields["lora_targets"] = (
            tuple(self.lora_targets)
            if isinstance(self.lora_targets, list | tuple)
            else self.lora_targets
        )
        return SFTSettings(**fields)

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


def sft_lora_rank_default() -> int:
    """Harness-1's rank, or the configured vLLM server's largest (LLM_MAX_LORA_RANK, its
    --max-lora-rank) when that is less: an adapter above it would be refused at publish.
    Read when asked, so the launch form and the API agree with the setting of the moment."""
    return lora_rank_default(SFTJobSettings.lora_rank, server_max=settings.LLM_MAX_LORA_RANK)


def sft_lora_alpha_default() -> int:
    """α for that rank, keeping Harness-1's α / rank (64 / 32)."""
    return sft_lora_rank_default() * SFTJobSettings.lora_alpha // SFTJobSettings.lora_rank
