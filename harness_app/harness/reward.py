"""Harness-1's episode reward, with every weight configurable.

For a non-empty curated set, with F2, TR, FA, TFA and U as in metrics.py and t the turns
used out of T_max:

    r = max(floor, w_f·F_beta + w_tr·TR + w_hit·1[FA > 0] + w_fa·FA + w_tfa·TFA
                   - w_missed·max(0, TFA - FA) - p_turn
                   + w_div·min(U / U_target, 1) - w_short·max(0, U_target - U))

    p_turn = P · min((t - t_free) / (T_max - t_free), 1)   when t > t_free, else 0

An empty curated set scores `empty_set_reward` outright. An episode that ended on
consecutive format failures (termination reason "format_errors") scores
`format_failure_reward` outright (Harness-1: -0.5), whatever it curated; None switches
that term off, and such an episode is scored like any other. The missed-answer term
charges for answer documents the policy saw but did not keep, which is what separates
curating from merely searching.

Named presets (`REWARD_PRESETS`, `RewardWeights.preset(name)`):

- `default`: `RewardWeights()`, the workbench's defaults (diversity 0.5, no turn penalty).
- `harness1`: the Harness-1 paper's v3 reward for 40-turn episodes: diversity
  +0.25·min(U/6, 1) and -0.08·max(0, 6 - U), turn penalty 0.02·min((t - 20)/20, 1) once
  t > 20 (with `max_turns = 40`), empty set -0.2, format failure -0.5.
- `library_default`: the reward library's own default, a turn penalty of up to 0.15.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from types import MappingProxyType
from typing import Any

from harness_app.harness.metrics import EpisodeMetrics, f_beta

# The termination reason the environment gives an episode ended by format failures.
FORMAT_ERRORS = "format_errors"
# The key of a reward-weights JSON object that names a preset (the other keys override it).
PRESET_KEY = "preset"


class RewardConfigError(ValueError):
    """A RewardWeights value or JSON document is invalid; the message names the field."""


@dataclass(frozen=True, slots=True)
class RewardWeights:
    """Weights of every reward term; see the module docstring and `REWARD_PRESETS`.

    `format_failure_reward` is what an episode ended by consecutive format failures
    scores outright (-0.5 as in Harness-1); None switches the term off.
    """

    empty_set_reward: float = -0.2
    format_failure_reward: float | None = -0.5
    floor: float = 0.001
    beta: float = 2.0
    f_beta: float = 0.7
    trajectory_recall: float = 0.3
    answer_hit: float = 1.0
    final_answer_recall: float = 0.8
    trajectory_final_answer_recall: float = 0.4
    missed_answer: float = 0.35
    turn_penalty: float = 0.0
    turn_penalty_free_turns: int = 24
    diversity: float = 0.5
    diversity_target: int = 6
    diversity_shortfall: float = 0.08

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "format_failure_reward":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RewardConfigError(f"reward weight {f.name!r} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise RewardConfigError(f"reward weight {f.name!r} must be finite, got {value!r}")
        if self.beta <= 0:
            raise RewardConfigError(f"reward weight 'beta' must be positive, got {self.beta}")
        if self.diversity_target < 1:
            raise RewardConfigError(
                f"reward weight 'diversity_target' must be >= 1, got {self.diversity_target}"
            )
        if self.turn_penalty_free_turns < 0:
            raise RewardConfigError(
                "reward weight 'turn_penalty_free_turns' must be >= 0, "
                f"got {self.turn_penalty_free_turns}"
            )

    @classmethod
    def library_default(cls) -> RewardWeights:
        """The reward library's own default, which charges up to 0.15 for long episodes."""
        return cls(turn_penalty=0.15)

    @classmethod
    def harness1(cls) -> RewardWeights:
        """Harness-1's v3 reward for 40-turn episodes (run them with max_turns=40)."""
        return cls(
            diversity=0.25,
            diversity_target=6,
            diversity_shortfall=0.08,
            turn_penalty=0.02,
            turn_penalty_free_turns=20,
            empty_set_reward=-0.2,
            format_failure_reward=-0.5,
        )

    @classmethod
    def preset(cls, name: str) -> RewardWeights:
        """A named preset; an unknown name is a RewardConfigError listing the known ones."""
        factory = REWARD_PRESETS.get(name.strip()) if isinstance(name, str) else None
        if factory is None:
            raise RewardConfigError(
                f"unknown reward preset {name!r}; known: {', '.join(REWARD_PRESETS)}"
            )
        return factory()

    def to_json(self) -> dict[str, float | None]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> RewardWeights:
        """Weights from a preset name, or from a (possibly partial) mapping.

        Missing keys keep their defaults. A mapping may name a preset under "preset"; its
        other keys then override that preset's weights. A bare string is a preset name.
        """
        if isinstance(data, str):
            return cls.preset(data)
        if not isinstance(data, Mapping):
            raise RewardConfigError(
                f"reward weights must be a JSON object or a preset name, got {type(data).__name__}"
            )
        values = dict(data)
        base = cls.preset(values.pop(PRESET_KEY)) if PRESET_KEY in values else cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise RewardConfigError(
                f"unknown reward weight(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return replace(base, **values)


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """Each term's signed contribution; `total` is their sum after the floor."""

    f_beta: float
    trajectory_recall: float
    answer_hit: float
    final_answer_recall: float
    trajectory_final_answer_recall: float
    missed_answer: float
    turn_penalty: float
    diversity: float
    diversity_shortfall: float
    raw: float  # sum before the floor (equal to total for the outright cases below)
    total: float
    empty_set: bool
    # The episode ended on consecutive format failures and scored format_failure_reward.
    format_failure: bool = False

    def to_json(self) -> dict[str, float | bool]:
        return asdict(self)


REWARD_PRESETS: Mapping[str, Callable[[], RewardWeights]] = MappingProxyType(
    {
        "default": RewardWeights,
        "harness1": RewardWeights.harness1,
        "library_default": RewardWeights.library_default,
    }
)


def turn_penalty(turns: int, max_turns: int, weights: RewardWeights) -> float:
    """p_turn: zero up to the free turns, then rising linearly to P at T_max and capped."""
    free = weights.turn_penalty_free_turns
    if turns <= free or weights.turn_penalty == 0:
        return 0.0
    if max_turns <= free:
        # A budget inside the free allowance leaves no ramp: any overrun costs the full P.
        return weights.turn_penalty
    return weights.turn_penalty * min((turns - free) / (max_turns - free), 1.0)


def compute_reward(
    metrics: EpisodeMetrics,
    *,
    max_turns: int,
    weights: RewardWeights | None = None,
    termination_reason: str = "",
) -> RewardBreakdown:
    """Score an episode; `max_turns` is the budget T_max the episode ran under.

    `termination_reason` is the environment's; "format_errors" scores
    `format_failure_reward` outright unless that weight is None.
    """
    w = weights or RewardWeights()
    if termination_reason == FORMAT_ERRORS and w.format_failure_reward is not None:
        return _outright_breakdown(w.format_failure_reward, format_failure=True)
    if metrics.curated_count == 0:
        return _outright_breakdown(w.empty_set_reward, empty_set=True)
    fa, tfa, u = (
        metrics.final_answer_recall,
        metrics.trajectory_final_answer_recall,
        metrics.tool_diversity,
    )
    terms = {
        "f_beta": w.f_beta * _metrics_f_beta(metrics, w.beta),
        "trajectory_recall": w.trajectory_recall * metrics.trajectory_recall,
        "answer_hit": w.answer_hit * (1.0 if fa > 0 else 0.0),
        "final_answer_recall": w.final_answer_recall * fa,
        "trajectory_final_answer_recall": w.trajectory_final_answer_recall * tfa,
        "missed_answer": _cost(w.missed_answer * max(0.0, tfa - fa)),
        "turn_penalty": _cost(turn_penalty(metrics.turns, max_turns, w)),
        "diversity": w.diversity * min(u / w.diversity_target, 1.0),
        "diversity_shortfall": _cost(w.diversity_shortfall * max(0, w.diversity_target - u)),
    }
    raw = sum(terms.values())
    return RewardBreakdown(
        **terms, raw=raw, total=max(w.floor, raw), empty_set=False, format_failure=False
    )


def _cost(amount: float) -> float:
    # A penalty as a negative contribution; "+ 0.0" turns -0.0 into 0.0 for JSON readers.
    return -amount + 0.0


def _metrics_f_beta(metrics: EpisodeMetrics, beta: float) -> float:
    # The metrics may have been computed with another beta; recompute rather than mix them.
    if metrics.beta == beta:
        return metrics.f_beta
    return f_beta(metrics.precision, metrics.curated_recall, beta)


def _outright_breakdown(
    value: float, *, empty_set: bool = False, format_failure: bool = False
) -> RewardBreakdown:
    return RewardBreakdown(
        f_beta=0.0,
        trajectory_recall=0.0,
        answer_hit=0.0,
        final_answer_recall=0.0,
        trajectory_final_answer_recall=0.0,
        missed_answer=0.0,
        turn_penalty=0.0,
        diversity=0.0,
        diversity_shortfall=0.0,
        raw=value,
        total=value,
        empty_set=empty_set,
        format_failure=format_failure,
    )
