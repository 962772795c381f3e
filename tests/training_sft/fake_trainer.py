"""A stand-in for training/sft/train.py: its settings, progress, result and errors are the
real ones; only `sft_train` is faked, so SFT job tests run in milliseconds and without
torch. `script` decides what a run does; every call's arguments are kept in `calls`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The real module's settings, progress, result and errors (it imports torch only inside
# its functions); only the training itself is faked.
from training.sft.train import (
    SFTDataError,
    SFTModelError,
    SFTOutOfMemory,
    SFTProgress,
    SFTResult,
    SFTSettings,
    SFTSettingsError,
)

__all__ = [
    "SFTDataError",
    "SFTModelError",
    "SFTOutOfMemory",
    "SFTProgress",
    "SFTResult",
    "SFTSettings",
    "SFTSettingsError",
]


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
