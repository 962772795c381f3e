"""What each reconstruction strategy costs the trainer, on a set of recorded sessions.

Polar's Fig. 5b compares prefix merging with a per-request builder on the same rollouts:
how many training sequences each yields, how many tokens go through the model, and how
many trainer updates that takes. This is that comparison for our own sessions.

For each strategy (`reconstruct.STRATEGIES`):

- sequences: training sequences with at least one sampled token (what the RL batch
  builder and the token SFT export keep);
- tokens processed: the sum of those sequences' lengths, prompt and completion: the
  tokens the trainer's forward passes run over. Per request, a prefix shared by N calls
  is counted N times;
- trained tokens: tokens with loss (sampled completion tokens). They are the same under
  both strategies: a strategy changes the context around them, never which are trained;
- forward passes and optimiser steps, as `training.rl.trainer.train_step` computes them:
  it drops sequences longer than `max_sequence_tokens`, runs one forward and backward
  pass per kept sequence, and takes min(substeps, kept sequences) optimiser steps per
  batch, one per minibatch. With `sequences_per_update` set (a trainer that fills
  fixed-size minibatches, as Polar's does), the steps are ceil(kept / that size) instead.

The sessions together are one batch for the trainer's count, as one task's recorded
sessions are one RL group and one step's batch (`training.rl.samples.rl_samples_for_recordings`).
Chain breaks are counted by kind (the text before the first colon), prefix merging only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_app.harness.llm.reconstruct import (
    PER_REQUEST,
    PREFIX_MERGE,
    STRATEGIES,
    CallTokens,
    reconstruct,
)
from harness_app.harness.types import JSONObject


@dataclass(frozen=True)
class TrainerShape:
    """The trainer settings that decide its passes and steps (RLJob's, by default 1)."""

    substeps: int = 1
    max_sequence_tokens: int | None = None
    sequences_per_update: int | None = None

    def __post_init__(self) -> None:
        if self.substeps < 1:
            raise ValueError(f"substeps must be >= 1, got {self.substeps}")
        if self.max_sequence_tokens is not None and self.max_sequence_tokens < 2:
            # The trainer's own bound (`training.rl.trainer.TrainSettings`).
            raise ValueError(
                f"max_sequence_tokens must be >= 2 or None, got {self.max_sequence_tokens}"
            )
        if self.sequences_per_update is not None and self.sequences_per_update < 1:
            raise ValueError(
                f"sequences_per_update must be >= 1 or None, got {self.sequences_per_update}"
            )

    def optimizer_steps(self, kept: int) -> int:
        if self.sequences_per_update is not None:
            return math.ceil(kept / self.sequences_per_update)
        return min(self.substeps, kept)


@dataclass
class StrategyFigures:
    strategy: str
    sequences: int = 0
    tokens_processed: int = 0
    trained_tokens: int = 0
    forward_passes: int = 0
    optimizer_steps: int = 0
    over_cap_sequences: int = 0
    breaks: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> JSONObject:
        return {
            "strategy": self.strategy,
            "sequences": self.sequences,
            "tokens_processed": self.tokens_processed,
            "trained_tokens": self.trained_tokens,
            "forward_passes": self.forward_passes,
            "optimizer_steps": self.optimizer_steps,
            "over_cap_sequences": self.over_cap_sequences,
            "breaks": dict(sorted(self.breaks.items())),
        }


# The figures whose per_request / prefix_merge ratio the report gives.
RATIO_FIGURES = (
    "sequences",
    "tokens_processed",
    "trained_tokens",
    "forward_passes",
    "optimizer_steps",
)


@dataclass
class StrategyReport:
    sessions: int
    calls: int
    shape: TrainerShape
    figures: dict[str, StrategyFigures]

    def ratio(self, figure: str) -> float | None:
        """per_request / prefix_merge for one figure; None when prefix merging has none."""
        merged = getattr(self.figures[PREFIX_MERGE], figure)
        if not merged:
            return None
        return float(getattr(self.figures[PER_REQUEST], figure)) / merged

    def to_json(self) -> JSONObject:
        return {
            "sessions": self.sessions,
            "calls": self.calls,
            "trainer": {
                "substeps": self.shape.substeps,
                "max_sequence_tokens": self.shape.max_sequence_tokens,
                "sequences_per_update": self.shape.sequences_per_update,
            },
            "strategies": {name: f.to_json() for name, f in self.figures.items()},
            "ratios": {name: self.ratio(name) for name in RATIO_FIGURES},
        }


def _break_kind(reason: str) -> str:
    return reason.split(":", 1)[0]


def _session_add(figures: StrategyFigures, calls: list[CallTokens], shape: TrainerShape) -> None:
    segments, breaks = reconstruct(calls, strategy=figures.strategy)
    trainable = [s for s in segments if s.sampled_tokens]
    cap = shape.max_sequence_tokens
    kept = [s for s in trainable if cap is None or len(s.token_ids) <= cap]
    figures.sequences += len(trainable)
    figures.tokens_processed += sum(len(s.token_ids) for s in trainable)
    figures.trained_tokens += sum(s.sampled_tokens for s in trainable)
    figures.over_cap_sequences += len(trainable) - len(kept)
    figures.forward_passes += len(kept)
    figures.breaks.update(_break_kind(b.reason) for b in breaks)


def strategy_report(
    sessions: Mapping[Any, Sequence[CallTokens]] | Sequence[Sequence[CallTokens]],
    shape: TrainerShape | None = None,
) -> StrategyReport:
    """Both strategies' figures over the sessions (each a list of its calls, in order)."""
    shape = shape or TrainerShape()
    groups = list(sessions.values()) if isinstance(sessions, Mapping) else list(sessions)
    figures = {name: StrategyFigures(name) for name in STRATEGIES}
    for calls in groups:
        for strategy_figures in figures.values():
            _session_add(strategy_figures, list(calls), shape)
    for strategy_figures in figures.values():
        strategy_figures.optimizer_steps = shape.optimizer_steps(strategy_figures.forward_passes)
    return StrategyReport(
        sessions=len(groups),
        calls=sum(len(calls) for calls in groups),
        shape=shape,
        figures=figures,
    )


def report_table(report: StrategyReport) -> str:
    """The report as a fixed-width text table, one row per figure."""
    rows = [
        ("sequences", "sequences"),
        ("tokens processed", "tokens_processed"),
        ("trained tokens", "trained_tokens"),
        ("forward passes", "forward_passes"),
        ("optimizer steps", "optimizer_steps"),
        ("over the length cap", "over_cap_sequences"),
    ]
    merged, per_call = report.figures[PREFIX_MERGE], report.figures[PER_REQUEST]
    lines = [
        f"{report.sessions} session(s), {report.calls} call(s); trainer: substeps "
        f"{report.shape.substeps}, max_sequence_tokens {report.shape.max_sequence_tokens}, "
        f"sequences_per_update {report.shape.sequences_per_update}",
        f"{'figure':<22}{PREFIX_MERGE:>14}{PER_REQUEST:>14}{'ratio':>10}",
    ]
    for label, name in rows:
        ratio = report.ratio(name)
        shown = f"{ratio:.2f}x" if ratio is not None else "-"
        lines.append(
            f"{label:<22}{getattr(merged, name):>14}{getattr(per_call, name):>14}{shown:>10}"
        )
    breaks = ", ".join(f"{k} {n}" for k, n in sorted(merged.breaks.items())) or "none"
    lines.append(f"chain breaks ({PREFIX_MERGE}): {breaks}")
    return "\n".join(lines)
