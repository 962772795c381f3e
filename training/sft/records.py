"""Episodes as SFT records: chat messages with tools, or token ids with loss labels.

Chat records are the conversation as the policy saw it, in the OpenAI format TRL's
SFTTrainer takes ({"messages": [...], "tools": [...]}):

- An LLM episode sent as chat completions: the last successful call's request messages
  plus its reply. The conversation is append-only, so that prompt holds everything before.
- A recorded episode (an outside agent behind the recording proxy): one record per chain
  of prefix merging (`reconstruct`), the chain's last call's request messages plus its reply. A
  session whose agent started subagents or compacted its context has several chains, and
  each is a conversation some agent really had.
- An LLM episode played in the `rerender` context mode (every prompt rebuilt from the
  state, so no call's prompt holds the one before): one record per successful call, the
  messages its prompt was rendered from (`ModelCall.own_prompt_messages`) plus its reply.
- An LLM episode sent token-in (the default; its requests hold token ids, not messages),
  and a baseline episode (no model calls): rebuilt from the Turn rows the way
  `harness.llm.chat_policy.ChatPolicy` builds its conversation: the system prompt (or the
  group's prefix messages), the turn-0 observation, then per turn the assistant's reply
  (the recorded reply, or for the baseline the turn's tool calls in OpenAI form) and the
  results: one tool message per call and the WORKINGMEMORY as a user message. The final
  observation is left out: no model ever saw it.

Turn rows keep the observation text whole, not each call's result, so the per-call results
are recovered by splitting the text at the "[tool_name] " headers the harness writes
(`harness.env._results_text`). When a split is ambiguous (a result that itself contains the
next header), that turn gets one tool message with all its results, and the manifest
counts it.

Token records are the prefix-merged training sequences of the recorded calls
(`harness.llm.reconstruct`): input_ids, labels (-100 where not sampled) and attention_mask;
a chain break starts another record. A rerender episode's calls are one record each, and
those breaks are by design: the manifest says "tokens", not "tokens_with_breaks". Baseline
episodes have no tokens and are skipped.

The export's `reconstruction` strategy (`SFTExport.reconstruction`) decides the records of
model calls: `prefix_merge` (the default) as above, or `per_request`: one record per
successful call, its prompt masked and its completion trained on ("tokens_per_request"),
and for a recorded episode's chat records one record per call, its request messages plus
its reply ("request_messages_per_call"). Chat records of our own rollouts are rebuilt from
their turns either way.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from harness_app.harness.ablation import Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.llm.chat_policy import SYSTEM_PROMPTS
from harness_app.harness.llm.reconstruct import (
    PER_REQUEST,
    PREFIX_MERGE,
    CallTokens,
    Segment,
    reconstruct,
    unexpected_breaks,
)
from harness_app.harness.tools import tool_specs
from harness_app.models import PolicyKind, ToolCallFormat
from trajectories.models import Episode, ModelCall, RolloutBatch, Turn
from trajectories.selectors.calls import call_tokens_by_episode

IGNORE_INDEX = -100  # what Hugging Face losses skip
WM_HEADER = "\n\n<WORKINGMEMORY>\n"


@dataclass
class EpisodeRows:
    """What rendering one episode needs, loaded in bulk for a chunk of episodes."""

    episode: Episode
    # (index, tool calls, observation, per-call tool results)
    turns: list[tuple[int, list[dict[str, Any]], str, list[dict[str, Any]]]] = field(
        default_factory=list
    )
    replies: dict[int, dict[str, Any]] = field(default_factory=dict)  # turn_index → message
    last_request: dict[str, Any] | None = None
    calls: list[CallTokens] = field(default_factory=list)
    # A recorded episode's chains, in `reconstruct`'s order: the last call's
    # request and its reply.
    chain_ends: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    # A rerender episode's calls: the messages each prompt was rendered from, the reply and
    # the tools of a chat request.
    per_call: list[tuple[list[dict[str, Any]], dict[str, Any], list[Any]]] = field(
        default_factory=list
    )


@dataclass
class Rendered:
    records: list[dict[str, Any]]
    # for the manifest: request_messages(_per_chain), turns, turns_merged_results, skipped:…
    how: str


# --- loading ----------------------------------------------------------------------------


def rows_load(
    episodes: list[Episode], *, fmt: str, reconstruction: str = PREFIX_MERGE
) -> list[EpisodeRows]:
    """At most five queries for the whole chunk, whatever its size."""
    rows = {e.pk: EpisodeRows(episode=e) for e in episodes}
    if fmt == "tokens":
        _calls_load(rows)
        return list(rows.values())
    recorded = {pk: row for pk, row in rows.items() if row.episode.is_recorded}
    rollouts = {pk: row for pk, row in rows.items() if pk not in recorded}
    if recorded:
        _chain_ends_load(recorded, reconstruction)
    if rollouts:
        turns = Turn.objects.filter(episode_id__in=rollouts).order_by("episode_id", "index")
        for episode_id, index, calls, observation, results in turns.values_list(
            "episode_id", "index", "tool_calls", "observation", "tool_results"
        ):
            rows[episode_id].turns.append((index, calls, observation, results))
        _replies_load(rollouts)
    return list(rows.values())


def _successful_calls(rows: dict[int, EpisodeRows]) -> Any:
    return ModelCall.objects.filter(episode_id__in=rows, error="").order_by("episode_id", "pk")


def _replies_load(rows: dict[int, EpisodeRows]) -> None:
    last: dict[int, int] = {}
    rerendered: list[int] = []
    for pk, episode_id, turn_index, response, rebuilt in _successful_calls(rows).values_list(
        "pk", "episode_id", "turn_index", "response", "rerendered"
    ):
        rows[episode_id].replies[turn_index] = _assistant(response)
        last[episode_id] = pk
        if rebuilt:
            rerendered.append(pk)
    if rerendered:
        for call in ModelCall.objects.filter(pk__in=rerendered).order_by("pk"):
            tools = call.request.get("tools") or []
            reply = _assistant(call.response)
            prompt = call.own_prompt_messages or []
            rows[call.episode_id].per_call.append((prompt, reply, tools))
    requests = ModelCall.objects.filter(pk__in=last.values()).values_list("episode_id", "request")
    for episode_id, request in requests:
        rows[episode_id].last_request = request


def _calls_load(rows: dict[int, EpisodeRows]) -> None:
    for episode_id, calls in call_tokens_by_episode(_successful_calls(rows)).items():
        rows[episode_id].calls.extend(calls)


def _chain_ends_load(rows: dict[int, EpisodeRows], reconstruction: str) -> None:
    # The chains come from the token ids, as on the episode page and in token exports;
    # only each chain's last call is read whole. Per request, every call is a chain.
    _calls_load(rows)
    ends: dict[int, list[Any]] = {}
    for pk, row in rows.items():
        segments, _ = reconstruct(row.calls, strategy=reconstruction)
        ends[pk] = [s.call_ids[-1] for s in segments if s.sampled_tokens]
    wanted = [call_id for ids in ends.values() for call_id in ids]
    found = {
        pk: (request, _assistant(response))
        for pk, request, response in ModelCall.objects.filter(pk__in=wanted).values_list(
            "pk", "request", "response"
        )
    }
    for pk, ids in ends.items():
        rows[pk].chain_ends = [found[call_id] for call_id in ids if call_id in found]


def _assistant(response: dict[str, Any]) -> dict[str, Any]:
    """The reply as ChatPolicy appends it to its conversation (content and tool calls)."""
    choice = (response.get("choices") or [{}])[0]
    message = {"content": choice["text"]} if "text" in choice else choice.get("message") or {}
    assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        assistant["tool_calls"] = message["tool_calls"]
    return assistant


# --- chat records -----------------------------------------------------------------------


def batch_tools(batch: RolloutBatch) -> list[dict[str, Any]]:
    """The tool schemas the batch's harness offered (they depend on its ablation)."""
    config = HarnessConfig(max_turns=batch.max_turns)
    specs = tool_specs(
        config.tool_limits,
        Ablation.from_json(batch.ablation),
        keep_ablated=config.keep_ablated_tools,
    )
    return [s.schema() for s in specs]


def system_message(version: str, fmt: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The system message ChatPolicy opens with (its `_system_message`; a test checks that
    the two agree)."""
    text = SYSTEM_PROMPTS[version]
    if fmt == ToolCallFormat.JSON_SCHEMA:
        described = "\n".join(json.dumps(t["function"], sort_keys=True) for t in tools)
        text += (
            "\n\nReply with exactly one JSON object "
            '{"tool": <tool name>, "arguments": {...}}. The tools:\n' + described
        )
    return {"role": "system", "content": text}


def chat_render(
    rows: EpisodeRows, tools: list[dict[str, Any]], *, reconstruction: str = PREFIX_MERGE
) -> Rendered:
    if rows.episode.is_recorded:
        return _recorded_render(rows, reconstruction)
    if rows.per_call:
        fmt = rows.episode.rollout_parts()[0].policy.tool_call_format
        offered = tools if fmt == ToolCallFormat.OPENAI_TOOLS else []
        records = [
            {"messages": [*prompt, reply], "tools": chat_tools or offered}
            for prompt, reply, chat_tools in rows.per_call
        ]
        return Rendered(records, "rerendered_per_call")
    request = rows.last_request
    if request is not None and "messages" in request:
        last = max(rows.replies)
        messages = [*request["messages"], rows.replies[last]]
        return Rendered(
            [{"messages": messages, "tools": request.get("tools") or []}], "request_messages"
        )
    if len(rows.turns) < 2:
        return Rendered([], "skipped:no_actions")
    batch, group, _ = rows.episode.rollout_parts()
    policy = batch.policy
    fmt = (
        ToolCallFormat.OPENAI_TOOLS
        if policy.kind == PolicyKind.BASELINE
        else policy.tool_call_format
    )
    version = policy.system_prompt_version if policy.kind != PolicyKind.BASELINE else "v1"
    opening = group.prefix_messages or [system_message(version, fmt, tools)]
    messages, merged = _conversation(rows, list(opening), fmt)
    offered = tools if fmt == ToolCallFormat.OPENAI_TOOLS else []
    return Rendered(
        [{"messages": messages, "tools": offered}], "turns_merged_results" if merged else "turns"
    )


def _recorded_render(rows: EpisodeRows, reconstruction: str) -> Rendered:
    records = [
        {"messages": [*request["messages"], reply], "tools": request.get("tools") or []}
        for request, reply in rows.chain_ends
        if isinstance(request.get("messages"), list)
    ]
    if not records:
        return Rendered([], "skipped:no_chat_calls")
    if reconstruction == PER_REQUEST:
        return Rendered(records, "request_messages_per_call")
    return Rendered(
        records, "request_messages" if len(records) == 1 else "request_messages_per_chain"
    )


def _conversation(
    rows: EpisodeRows, messages: list[dict[str, Any]], fmt: str
) -> tuple[list[dict[str, Any]], bool]:
    """The conversation from the turn rows; also whether any turn's results were merged."""
    turns = rows.turns
    messages.append({"role": "user", "content": turns[0][2]})
    merged = False
    for position, (index, calls, observation, stored) in enumerate(turns[1:], start=1):
        reply = rows.replies.get(index - 1) or _assistant_from_calls(calls)
        messages.append(reply)
        if position == len(turns) - 1:
            break  # the final observation was never shown to the model
        if fmt != ToolCallFormat.OPENAI_TOOLS or not _replied_with_calls(reply):
            messages.append({"role": "user", "content": observation})
            continue
        results, working_memory = split_observation(observation, calls)
        if len(stored) == len(calls):
            # Rows written since tool results are stored: each call's result exactly.
            results = [str(r.get("content", "")) for r in stored]
        merged = merged or len(results) != len(calls)
        ids = [str(c.get("call_id", "")) for c in calls]
        messages.extend(
            {"role": "tool", "tool_call_id": i, "content": r}
            for i, r in zip(ids, results, strict=False)
        )
        messages.append({"role": "user", "content": working_memory})
    return messages, merged


def _replied_with_calls(reply: dict[str, Any]) -> bool:
    # ChatPolicy answers with tool messages only when it parsed calls from the reply: the
    # server's tool_calls, or hermes <tool_call> blocks left in the text.
    return bool(reply.get("tool_calls")) or "<tool_call>" in (reply.get("content") or "")


def _assistant_from_calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A baseline turn's actions as an OpenAI assistant message (arguments as JSON text)."""
    tool_calls = [
        {
            "id": str(call.get("call_id") or f"call_{i}"),
            "type": "function",
            "function": {"name": str(call.get("name", "")), "arguments": _arguments(call)},
        }
        for i, call in enumerate(calls)
    ]
    return {"role": "assistant", "content": "", "tool_calls": tool_calls}


def _arguments(call: dict[str, Any]) -> str:
    arguments = call.get("arguments", {})
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def split_observation(observation: str, calls: list[dict[str, Any]]) -> tuple[list[str], str]:
    """(each call's result text, the WORKINGMEMORY) from a turn's whole observation.

    The harness writes "[name] result" per call, joined by blank lines, then the WM. When
    the headers cannot be placed unambiguously, one string holds all the results.
    """
    cut = observation.rfind(WM_HEADER)
    if cut < 0:
        return [], observation
    results_text, working_memory = observation[:cut], observation[cut + 2 :]
    headers = [f"[{c.get('name') or 'no tool'}] " for c in calls]
    parts = _split_results(results_text, headers)
    return (parts if parts is not None else [results_text]), working_memory


def _split_results(text: str, headers: list[str]) -> list[str] | None:
    if not headers or not text.startswith(headers[0]):
        return None
    separators = Counter("\n\n" + h for h in headers[1:])
    # Unambiguous only if each separator occurs exactly as often as calls need it.
    if any(text.count(sep) != n for sep, n in separators.items()):
        return None
    cuts = sorted(i for sep in separators for i in _occurrences(text, sep))
    bounds = [0, *cuts, len(text)]
    chunks = [text[a:b].removeprefix("\n\n") for a, b in itertools.pairwise(bounds)]
    if any(not chunk.startswith(h) for chunk, h in zip(chunks, headers, strict=True)):
        return None
    return [chunk.removeprefix(h) for chunk, h in zip(chunks, headers, strict=True)]


def _occurrences(text: str, needle: str) -> Iterator[int]:
    start = text.find(needle)
    while start >= 0:
        yield start
        start = text.find(needle, start + 1)


# --- token records ----------------------------------------------------------------------


def _token_record(segment: Segment) -> dict[str, Any]:
    return {
        "input_ids": segment.token_ids,
        "labels": [
            t if m else IGNORE_INDEX
            for t, m in zip(segment.token_ids, segment.loss_mask, strict=True)
        ],
        "attention_mask": [1] * len(segment.token_ids),
    }


def tokens_render(rows: EpisodeRows, *, reconstruction: str = PREFIX_MERGE) -> Rendered:
    if not any(call.completion_ids for call in rows.calls):
        # No calls, or a server that returned no token ids (a hosted teacher).
        return Rendered([], "skipped:no_token_ids")
    segments, breaks = reconstruct(rows.calls, strategy=reconstruction)
    records = [_token_record(s) for s in segments if s.sampled_tokens]
    if reconstruction == PER_REQUEST:
        return Rendered(records, "tokens_per_request")
    return Rendered(records, "tokens_with_breaks" if unexpected_breaks(breaks) else "tokens")


def records_render(
    rows: Iterable[EpisodeRows], *, fmt: str, reconstruction: str = PREFIX_MERGE
) -> Iterator[tuple[Episode, Rendered]]:
    tools: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        if fmt == "tokens":
            yield row.episode, tokens_render(row, reconstruction=reconstruction)
            continue
        batch = row.episode.batch
        if batch is None:
            # A recorded episode: its requests carry their own messages and tools.
            yield row.episode, chat_render(row, [], reconstruction=reconstruction)
            continue
        if batch.pk not in tools:
            tools[batch.pk] = batch_tools(batch)
        yield row.episode, chat_render(row, tools[batch.pk])
