"""How much of an RL job's wall time the rollouts and the trainer each sat idle.

A step has two spans: its rollouts (batch created → last episode finished) and its
training (build, train, save, publish). Over the job's wall time (first rollout start to
last training end), the rollout-idle fraction is the share with no rollout batch running,
the trainer-idle fraction the share with no step training. In sync mode the two spans of
a step follow each other, so the fractions add up to about one; async mode overlaps step
n's training with step n+1's rollouts, and both fall. Plain floats (seconds since the
epoch): the job page, the bench and the tests all call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepSpan:
    rollout_start: float
    rollout_end: float
    train_start: float
    train_end: float


@dataclass(frozen=True)
class IdleFractions:
    wall_s: float
    rollout_busy_s: float
    train_busy_s: float
    overlap_s: float  # seconds when a batch ran and a step trained at once
    rollout_idle: float
    trainer_idle: float

    def to_json(self) -> dict[str, float]:
        return {
            "wall_s": self.wall_s,
            "rollout_busy_s": self.rollout_busy_s,
            "train_busy_s": self.train_busy_s,
            "overlap_s": self.overlap_s,
            "rollout_idle": self.rollout_idle,
            "trainer_idle": self.trainer_idle,
        }


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(spans: Sequence[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


def _intersection(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def overlap_seconds(training: StepSpan, rollouts: StepSpan) -> float:
    """How long `training`'s step trained while `rollouts`' step sampled (step n against
    step n+1: zero in sync mode)."""
    start = max(training.train_start, rollouts.rollout_start)
    end = min(training.train_end, rollouts.rollout_end)
    return max(0.0, end - start)


def idle_fractions(steps: Sequence[StepSpan]) -> IdleFractions | None:
    """The job's idle fractions over its steps' spans; None without a step."""
    if not steps:
        return None
    rollout = _union((s.rollout_start, s.rollout_end) for s in steps)
    train = _union((s.train_start, s.train_end) for s in steps)
    start = min(s.rollout_start for s in steps)
    end = max(max(s.train_end, s.rollout_end) for s in steps)
    wall = max(end - start, 1e-9)
    rollout_busy, train_busy = _length(rollout), _length(train)
    return IdleFractions(
        wall_s=wall,
        rollout_busy_s=rollout_busy,
        train_busy_s=train_busy,
        overlap_s=_intersection(rollout, train),
        rollout_idle=1.0 - rollout_busy / wall,
        trainer_idle=1.0 - train_busy / wall,
    )
