"""A stand-in for training/sft_train.py with its interface (settings, progress, result,
errors), so SFT job tests run in milliseconds and without torch. `script` decides what a
run does; every call's arguments are kept in `calls`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LORA_TARGETS_ALL_LINEAR = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)  # fmt: skip


class SFTSettingsError(ValueError):
    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SFTDataError(ValueError):
    pass


class SFTModelError(ValueError):
    pass


class SFTOutOfMemory(RuntimeError):
    pass


@dataclass(frozen=True)
class SFTSettings:
    lora_rank: int = 32
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = LORA_TARGETS_ALL_LINEAR
    learning_rate: float = 1e-4
    epochs: float = 3.0
    max_length: int = 4096
    batch_size: int = 1
    grad_accum: int = 1
    eval_fraction: float = 0.1
    seed: int = 0
    gradient_checkpointing: bool | None = None
    save_steps: int = 50
    eval_steps: int = 10

    def check(self) -> None:
        if self.max_length < 16:
            raise SFTSettingsError("max_length too small", field="max_length")


@dataclass
class SFTProgress:
    step: int
    total_steps: int
    epoch: float
    loss: float | None
    eval_loss: float | None
    learning_rate: float | None
    tokens_per_s: float | None


@dataclass
class SFTResult:
    status: str
    adapter_dir: Path | None
    checkpoint_dir: Path | None
    metrics: dict[str, Any]
    manifest: dict[str, Any]


METRICS = {
    "eval_loss_before": 2.5,
    "eval_loss_after": 1.25,
    "eval_action_logprob_before": -2.5,
    "eval_action_logprob_after": -1.25,
    "train_tokens": 1200,
    "tokens_per_s": 400.0,
    "seconds": 3.0,
    "steps": 3,
}
MANIFEST = {"input": "chat_template", "records": 2, "train_episodes": 1, "eval_episodes": 1}


def trains_three_steps(**kwargs: Any) -> SFTResult:
    """Three steps with a falling loss, an eval loss at steps 0 and 3, then completed."""
    progress = kwargs["progress"]
    output = Path(kwargs["output_dir"])
    progress(SFTProgress(0, 3, 0.0, None, 2.5, None, None))
    for step, loss in ((1, 2.0), (2, 1.5), (3, 1.0)):
        progress(SFTProgress(step, 3, step / 1.0, loss, None, 1e-4, 400.0))
    progress(SFTProgress(3, 3, 3.0, None, 1.25, None, None))
    adapter = output / "adapter"
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / "adapter_config.json").write_text("{}")
    return SFTResult("completed", adapter, output / "checkpoint-3", dict(METRICS), dict(MANIFEST))


@dataclass
class FakeTrainer:
    """What sft_jobs.trainer_module() returns in the tests."""

    script: Callable[..., SFTResult] = trains_three_steps
    calls: list[dict[str, Any]] = field(default_factory=list)

    SFTSettings = SFTSettings
    SFTSettingsError = SFTSettingsError
    SFTDataError = SFTDataError
    SFTModelError = SFTModelError
    SFTOutOfMemory = SFTOutOfMemory

    def sft_train(self, **kwargs: Any) -> SFTResult:
        self.calls.append(kwargs)
        return self.script(**kwargs)
