"""Rebuild training sequences from recorded model calls (as Polar does for any harness).

Two strategies, by name (`STRATEGIES`). `reconstruct` is the one place a strategy is
chosen: every reader of training sequences (SFT exports, RL batches, the episode page's
token strips, the calls selector, the recording report) calls it with the strategy it was
given, so all of them see the same segments in the same order with the same break labels.
`strategy_clean` checks a name and accepts the older "prefix"/"request".

- per request (`per_request`): every call is its own sequence; the prompt is masked out
  and the completion is trained on.
- prefix merging (`prefix_merge`, the default): a call joins a chain when that chain's
  tokens so far (its last prompt plus the completion sampled for it) are a prefix of the
  call's prompt. The tokens in
  between — tool results, chat-template markup — are masked out; sampled tokens keep their
  ids and rollout logprobs. A call that extends no chain starts a new one, and the break is
  recorded with its reason, so a re-tokenised or rewritten history never silently trains on
  tokens the policy did not sample.

A call whose prompt was rebuilt from scratch (the chat policy's `rerender` context mode)
never extends an earlier call by design: it is a sequence of its own, and its break is
named `rerender`, which, like `first_call`, is expected and no warning (`EXPECTED_BREAKS`).
Each such sequence is one turn: its prompt masked, its completion trained on.

Calls recorded from an outside agent (trajectories/recording.py) carry an `agent`: a
fingerprint of their system prompt, which tells a main agent from the subagents it starts.
Prefix merging merges each agent's calls on their own (our own rollouts have one agent,
"") and names the breaks: a subagent starting, or the agent compacting its context (its
history shrank or was rewritten).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import partial


@dataclass(frozen=True)
class CallTokens:
    call_id: Hashable
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    policy_version: str = ""
    agent: str = ""  # system-prompt fingerprint; "" for our own rollouts
    rerendered: bool = False  # the prompt was rebuilt, not extended (rerender mode)


# Break reasons that are by design, not a failure to merge.
EXPECTED_BREAKS = frozenset({"first_call", "rerender"})


@dataclass
class Segment:
    """One training sequence. loss_mask[i] == 1 exactly where token i was sampled."""

    call_ids: list[Hashable] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_versions: set[str] = field(default_factory=set)
    agent: str = ""

    def append(
        self, tokens: list[int], *, sampled: bool, logprobs: list[float] | None = None
    ) -> None:
        self.token_ids.extend(tokens)
        self.loss_mask.extend([1 if sampled else 0] * len(tokens))
        self.logprobs.extend(logprobs if sampled and logprobs else [0.0] * len(tokens))

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class ChainBreak:
    call_id: Hashable
    reason: str


def _start(call: CallTokens) -> Segment:
    segment = Segment(
        call_ids=[call.call_id], policy_versions={call.policy_version}, agent=call.agent
    )
    segment.append(call.prompt_ids, sampled=False)
    segment.append(call.completion_ids, sampled=True, logprobs=call.logprobs)
    return segment


def _per_request(calls: Iterable[CallTokens]) -> list[Segment]:
    return [_start(call) for call in calls]


def _first_difference(chain: list[int], prompt: list[int]) -> int:
    for i, (a, b) in enumerate(zip(chain, prompt, strict=False)):
        if a != b:
            return i
    return min(len(chain), len(prompt))


def _merge(
    calls: Iterable[CallTokens], reason: Callable[[list[Segment], CallTokens], str]
) -> tuple[list[Segment], list[ChainBreak]]:
    chains: list[Segment] = []
    breaks: list[ChainBreak] = []
    for call in calls:
        if call.rerendered:
            breaks.append(ChainBreak(call.call_id, "rerender" if chains else "first_call"))
            chains.append(_start(call))
            continue
        target = next(
            (c for c in chains if call.prompt_ids[: len(c.token_ids)] == c.token_ids), None
        )
        if target is None:
            breaks.append(ChainBreak(call.call_id, reason(chains, call)))
            chains.append(_start(call))
            continue
        target.call_ids.append(call.call_id)
        target.policy_versions.add(call.policy_version)
        target.append(call.prompt_ids[len(target.token_ids) :], sampled=False)
        target.append(call.completion_ids, sampled=True, logprobs=call.logprobs)
    return chains, breaks


def _by_agent(calls: Iterable[CallTokens]) -> tuple[list[Segment], list[ChainBreak]]:
    """Prefix merging within each agent: the main agent's chains first, then each subagent's
    in the order it first called.

    A call can only extend a chain that starts with its own system prompt, so merging per
    agent finds the chains merging over all calls would; what the agent adds is the order
    and the reasons: `first_call`, `subagent_start`, `context_compaction: …` (the prompt is
    shorter than the agent's history: it summarised or dropped turns) and
    `history_rewritten: …` (same length or longer, but an earlier token differs: an edited
    or re-tokenised history).
    """
    by_agent: dict[str, list[CallTokens]] = {}
    for call in calls:
        by_agent.setdefault(call.agent, []).append(call)
    segments: list[Segment] = []
    breaks: list[ChainBreak] = []
    for position, agent_calls in enumerate(by_agent.values()):
        first = "first_call" if position == 0 else "subagent_start"
        chains, agent_breaks = _merge(agent_calls, partial(_agent_reason, first=first))
        segments.extend(chains)
        breaks.extend(agent_breaks)
    return segments, breaks


def _agent_reason(chains: list[Segment], call: CallTokens, *, first: str) -> str:
    if not chains:
        return first
    last = chains[-1]
    at = _first_difference(last.token_ids, call.prompt_ids)
    if len(call.prompt_ids) < len(last.token_ids):
        return (
            f"context_compaction: the prompt ({len(call.prompt_ids)} tokens) is shorter than "
            f"the history ({len(last.token_ids)}), first difference at token {at}"
        )
    return f"history_rewritten: prefix mismatch at token {at} of {len(last.token_ids)}"


# --- named strategies ----------------------------------------------------------------------

PREFIX_MERGE = "prefix_merge"
PER_REQUEST = "per_request"
STRATEGIES = (PREFIX_MERGE, PER_REQUEST)
# The selector and export mode names that were public before the strategies had names.
STRATEGY_ALIASES = {"prefix": PREFIX_MERGE, "request": PER_REQUEST}


def strategy_clean(value: str, *, field: str = "reconstruction") -> str:
    """The strategy's canonical name; a ValueError naming `field` for anything else."""
    name = STRATEGY_ALIASES.get(value, value)
    if name not in STRATEGIES:
        raise ValueError(
            f"{field}: unknown reconstruction strategy {value!r}; use one of "
            f"{', '.join(STRATEGIES)} (or the aliases {', '.join(STRATEGY_ALIASES)})"
        )
    return name


def reconstruct(
    calls: Iterable[CallTokens], *, strategy: str = PREFIX_MERGE
) -> tuple[list[Segment], list[ChainBreak]]:
    """The calls' sequences under a strategy (aliases accepted; a ValueError names it).

    prefix_merge: chains merged by prefix within each agent, the main agent's first, and
    every break with its reason. per_request: one sequence per call (its prompt masked, its
    completion trained on) and no breaks: N calls are N sequences, and a prefix the calls
    share is processed again by each.
    """
    if strategy_clean(strategy) == PER_REQUEST:
        return _per_request(calls), []
    return _by_agent(calls)


def unexpected_breaks(breaks: Iterable[ChainBreak]) -> list[ChainBreak]:
    """The breaks that are a failure to merge, not by design (`EXPECTED_BREAKS`)."""
    return [b for b in breaks if b.reason not in EXPECTED_BREAKS]
