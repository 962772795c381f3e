"""Group-relative advantages, as in Harness-1 (and GRPO before it).

Every query is sampled N times (a rollout group). An episode's advantage is its reward
minus the mean reward of its group, so the policy is pushed towards what beat its siblings
on the same query rather than towards easy queries. Harness-1's default stops there;
dividing by the group's standard deviation (GRPO's choice) is optional.

A group whose rewards are all equal carries no signal: every advantage would be zero, and
with std normalisation 0/0. Such groups are dropped and reported, not silently kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

# Rewards closer than this count as equal: the reward is a float sum of weighted terms,
# so two episodes with identical outcomes can differ in the last bits.
ZERO_VARIANCE_TOL = 1e-9


@dataclass(frozen=True)
class AdvantageSettings:
    normalize_std: bool = False
    std_eps: float = 1e-6
    drop_zero_variance: bool = True

    def __post_init__(self) -> None:
        if self.std_eps <= 0:
            raise ValueError(f"std_eps must be positive, got {self.std_eps}")


@dataclass
class GroupAdvantages:
    """Advantages by episode id for the kept groups, and which groups were dropped."""

    advantages: dict[int, float] = field(default_factory=dict)
    kept_groups: list[int] = field(default_factory=list)
    dropped_groups: list[int] = field(default_factory=list)


def group_advantage_values(
    rewards: list[float], settings: AdvantageSettings | None = None
) -> list[float] | None:
    """The advantages of one group, in order; None when the group is dropped."""
    s = settings or AdvantageSettings()
    values = np.asarray(rewards, dtype=np.float64)
    if values.size == 0:
        return None
    if s.drop_zero_variance and float(values.max() - values.min()) <= ZERO_VARIANCE_TOL:
        return None
    centred = values - values.mean()
    if s.normalize_std:
        # Population std (ddof=0): the group is the whole population being compared.
        centred = centred / (values.std() + s.std_eps)
    return [float(a) for a in centred]


def group_advantages(
    rewards: Mapping[int, Mapping[int, float]], settings: AdvantageSettings | None = None
) -> GroupAdvantages:
    """`rewards` maps group id → {episode id → reward}; groups keep their given order."""
    out = GroupAdvantages()
    for group_id, by_episode in rewards.items():
        episode_ids = list(by_episode)
        values = group_advantage_values([by_episode[e] for e in episode_ids], settings)
        if values is None:
            out.dropped_groups.append(group_id)
            continue
        out.kept_groups.append(group_id)
        out.advantages.update(zip(episode_ids, values, strict=True))
    return out
