"""Token-faithful training sequences from recorded model calls.

Each episode's calls are rebuilt into segments by harness_app.harness.llm.reconstruct
(prefix merging by default: one segment per chain of calls whose prompts extend each
other). A segment becomes a `TrainSequence`: `prompt_ids` are the tokens before the first
sampled token, `response_ids` everything after, and `loss_mask` (aligned with
`response_ids`) is 1 exactly on tokens the sampler produced. Tool results and chat-template
markup between turns stay in the sequence as context but are masked, so the trainer scores
the very tokens that were sampled, with the logprobs the sampler reported for them.

Every segment of an episode carries the episode's reward and advantage: the reward is for
the whole trajectory, and a chain break (a re-rendered history) must not change it. An
episode played in the `rerender` context mode has one segment per call (per turn), each
its own prompt (masked) and completion (trained on) under the episode's advantage; those
breaks are by design (`EXPECTED_BREAKS`) and are not counted as breaks.

An episode is excluded, with the reason, when it cannot be trained on faithfully: its calls
came from more than one policy version (the rollout logprobs would mix two behaviour
policies, so no single importance ratio is right), its group was dropped for zero variance,
it has no advantage, or it produced no sampled token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness_app.harness.llm.reconstruct import (
    PREFIX_MERGE,
    STRATEGIES,
    STRATEGY_ALIASES,
    CallTokens,
    ChainBreak,
    Segment,
    reconstruct,
    strategy_clean,
    unexpected_breaks,
)
from training.rl.advantages import AdvantageSettings, group_advantages

# The reconstruction strategies, then the older names kept as aliases (rl_export --mode).
MODES = (*STRATEGIES, *STRATEGY_ALIASES)


@dataclass(frozen=True)
class EpisodeCalls:
    """One finished episode as the batch builder needs it: ids, outcome and its calls."""

    episode_id: int
    group_id: int
    reward: float
    termination_reason: str
    calls: list[CallTokens]


@dataclass(frozen=True)
class TrainSequence:
    """One row of an RL batch (the Parquet export's columns, one to one)."""

    sample_id: str
    group_id: int
    episode_id: int
    segment_idx: int
    policy_version: str
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    reward: float
    advantage: float
    termination_reason: str

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def sampled_logprobs(self) -> list[float]:
        """The rollout logprobs of the sampled tokens only, in order."""
        return [lp for lp, m in zip(self.rollout_logprobs, self.loss_mask, strict=True) if m]


@dataclass(frozen=True)
class Exclusion:
    episode_id: int
    reason: str


@dataclass
class BatchBuild:
    sequences: list[TrainSequence] = field(default_factory=list)
    exclusions: list[Exclusion] = field(default_factory=list)
    # Chain breaks other than each chain's first call: how often prefix merging failed.
    breaks: list[ChainBreak] = field(default_factory=list)
    kept_groups: list[int] = field(default_factory=list)
    dropped_groups: list[int] = field(default_factory=list)

    @property
    def episodes(self) -> int:
        return len({s.episode_id for s in self.sequences})

    def exclusion_counts(self) -> dict[str, int]:
        """Exclusions by the reason's kind (the text before the first colon)."""
        counts: dict[str, int] = {}
        for exclusion in self.exclusions:
            kind = exclusion.reason.split(":", 1)[0]
            counts[kind] = counts.get(kind, 0) + 1
        return counts


def sequence_from_segment(
    segment: Segment, episode: EpisodeCalls, *, index: int, advantage: float
) -> TrainSequence:
    """Split a segment at its first sampled token into prompt and masked response."""
    start = segment.loss_mask.index(1)
    return TrainSequence(
        sample_id=f"{episode.episode_id}-{index}",
        group_id=episode.group_id,
        episode_id=episode.episode_id,
        segment_idx=index,
        policy_version=next(iter(segment.policy_versions), ""),
        prompt_ids=segment.token_ids[:start],
        response_ids=segment.token_ids[start:],
        loss_mask=segment.loss_mask[start:],
        rollout_logprobs=segment.logprobs[start:],
        reward=episode.reward,
        advantage=advantage,
        termination_reason=episode.termination_reason,
    )


def exclusion_reason(episode: EpisodeCalls) -> str:
    """Why the episode cannot be trained on faithfully, or "" when it can."""
    versions = sorted({c.policy_version for c in episode.calls})
    if len(versions) > 1:
        return f"mixed_policy_versions: calls from {', '.join(map(repr, versions))}"
    if not any(c.completion_ids for c in episode.calls):
        return "no_sampled_tokens: no successful model call"
    return ""


def build_sequences(
    episodes: Iterable[EpisodeCalls],
    advantages: Mapping[int, float],
    *,
    mode: str = PREFIX_MERGE,
) -> BatchBuild:
    """Sequences for the episodes that have an advantage; the rest are excluded.

    `mode` is the reconstruction strategy (or its alias); a ValueError names it."""
    mode = strategy_clean(mode, field="reconstruction")
    out = BatchBuild()
    for episode in episodes:
        reason = exclusion_reason(episode)
        if not reason and episode.episode_id not in advantages:
            reason = "no_advantage: not in the advantages given"
        if reason:
            out.exclusions.append(Exclusion(episode.episode_id, reason))
            continue
        segments, breaks = reconstruct(episode.calls, strategy=mode)
        out.breaks.extend(unexpected_breaks(breaks))
        trainable = [s for s in segments if s.sampled_tokens]
        advantage = advantages[episode.episode_id]
        out.sequences.extend(
            sequence_from_segment(s, episode, index=i, advantage=advantage)
            for i, s in enumerate(trainable)
        )
    return out


def _split_trainable(
    episodes: Iterable[EpisodeCalls],
) -> tuple[list[EpisodeCalls], list[Exclusion]]:
    trainable: list[EpisodeCalls] = []
    excluded: list[Exclusion] = []
    for episode in episodes:
        reason = exclusion_reason(episode)
        if reason:
            excluded.append(Exclusion(episode.episode_id, reason))
        else:
            trainable.append(episode)
    return trainable, excluded


def _rewards_by_group(episodes: list[EpisodeCalls]) -> dict[int, dict[int, float]]:
    rewards: dict[int, dict[int, float]] = {}
    for episode in episodes:
        rewards.setdefault(episode.group_id, {})[episode.episode_id] = episode.reward
    return rewards


def batch_build(
    episodes: Iterable[EpisodeCalls],
    settings: AdvantageSettings | None = None,
    *,
    mode: str = PREFIX_MERGE,
) -> BatchBuild:
    """Advantages within each group, then sequences: the whole batch in one call.

    Untrainable episodes are excluded before the group means are taken, so the baseline
    is the mean over exactly the episodes trained on and their advantages sum to zero.
    """
    trainable, excluded = _split_trainable(episodes)
    rewards = _rewards_by_group(trainable)
    computed = group_advantages(rewards, settings)
    dropped = set(computed.dropped_groups)
    excluded += [
        Exclusion(
            e.episode_id,
            f"zero_variance_group: the {len(rewards[e.group_id])} reward(s) of group "
            f"{e.group_id} are all equal",
        )
        for e in trainable
        if e.group_id in dropped
    ]
    kept = [e for e in trainable if e.group_id not in dropped]
    out = build_sequences(kept, computed.advantages, mode=mode)
    out.exclusions = excluded + out.exclusions
    out.kept_groups, out.dropped_groups = computed.kept_groups, computed.dropped_groups
    return out
