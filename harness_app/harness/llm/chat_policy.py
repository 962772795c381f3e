"""An OpenAI-compatible chat policy: the harness's tools, offered to a model behind vLLM.

Two context modes, chosen by the policy config (`context_mode`):

- `append` (ReinforceNow / Polar): the conversation is append-only: each turn adds the
  tool results and the new WORKINGMEMORY after what the model already saw, and nothing
  earlier is ever rewritten, so every call's prompt extends the previous call's prompt plus
  its completion (what prefix merging in reconstruct.py relies on). The environment counts
  the context and ends the episode at its limit; the policy also refuses to send a token-in
  prompt longer than `context_limit` (default 32,768), ending with `context_budget`.
- `rerender` (Harness-1): every prompt is rebuilt from scratch (llm/context.py): system,
  tools, the question, the WORKINGMEMORY snapshot frozen at turn n−5, the last 5 turns, with
  the `[Context: used/LIMIT]` marker (default LIMIT 30,720) counted in real tokens by the
  server's tokenizer (/tokenize), truncation passes when the prompt is over LIMIT, and
  `context_budget` when nothing more can go. Each call is recorded as `rerendered`, so
  reconstruction gives it its own training sequence.

Two action formats, chosen by the policy config:

- `openai_tools`: tools go in the request and the server's tool-call parser (hermes for
  vLLM) extracts the calls.
- `json_schema`: the tools are described in the system prompt and the reply is constrained
  by `response_format` to one JSON action, so even a tiny model produces valid actions.

Requests go token-in by default (`token_in`): the policy asks the server to render the
conversation with its chat template (/tokenize) but sends the completion request as token
ids, splicing the newly rendered tokens after the exact tokens of the previous prompt and
completion. A server that re-rendered the assistant's reply from text could re-tokenise it
differently from what was sampled; token-in keeps every prompt a true extension of the last,
so the recorded calls merge into one trainable sequence. `token_in=False` uses plain chat
completions (for OpenAI-compatible servers without /tokenize).

A completion endpoint parses no tool calls, so on the token-in path the policy reads them
from the raw text, in the syntax of the model family named by `tool_parser` (hermes,
harmony, llama3_json or mistral; see tool_parsers.py).

Every call, failed or not, is kept in `calls` with its turn index for the worker to persist.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from harness_app.harness.budget import (
    CONTEXT_MODES,
    RERENDER_CONTEXT_LIMIT,
    TokenCounter,
    context_marker,
    estimate_tokens,
)
from harness_app.harness.llm import context
from harness_app.harness.llm.client import ChatClient, ModelCallError, ModelCallRecord, Sampling
from harness_app.harness.llm.tool_parsers import (
    NEEDS_SPECIAL_TOKENS,
    TOOL_PARSERS,
    json_action_call,
    parse_tool_calls,
)
from harness_app.harness.policies.base import PolicyError
from harness_app.harness.types import Observation, ToolCall

SYSTEM_PROMPT_V1 = """You are a search agent working inside a search harness. Your goal is to \
find and curate every document needed to answer the user's question, not to answer it \
yourself. The harness keeps your working memory: after each action it shows the results \
and a WORKINGMEMORY with your curated set, candidate pool, searches so far, bridge \
entities, verifications and remaining budget.

Each turn, call one or more tools. Search for the entities in the question, follow bridge \
entities to the next hop, curate the documents that hold evidence with an importance tag \
(very_high, high, fair, low), verify key claims, and call end_search when the curated set \
holds the evidence."""

SYSTEM_PROMPTS = {"v1": SYSTEM_PROMPT_V1}

TOOL_CALL_FORMATS = ("openai_tools", "json_schema")
APPEND_CONTEXT_LIMIT = 32_768  # HarnessConfig.context_token_limit's default


class PolicyStop(PolicyError):
    """The policy ended the episode; `reason` is recorded as the termination reason."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


@dataclass
class ChatPolicyConfig:
    system_prompt_version: str = "v1"
    tool_call_format: str = "openai_tools"
    termination_policy: str = "max_turns"  # or "last_tool"
    sampling: Sampling = field(default_factory=Sampling)
    retries: int = 3
    retry_backoff_s: float = 1.0
    token_in: bool = True
    # How calls are read from the raw text when the server returns none (tool_parsers.py).
    tool_parser: str = "hermes"
    context_mode: str = "append"  # or "rerender" (see the module docstring)
    # The prompt cap in real tokens; None: 30,720 in rerender mode, 32,768 in append mode.
    context_limit: int | None = None

    @property
    def limit(self) -> int:
        if self.context_limit is not None:
            return self.context_limit
        return RERENDER_CONTEXT_LIMIT if self.context_mode == "rerender" else APPEND_CONTEXT_LIMIT

    def __post_init__(self) -> None:
        if self.system_prompt_version not in SYSTEM_PROMPTS:
            known = ", ".join(SYSTEM_PROMPTS)
            raise ValueError(
                f"unknown system_prompt_version {self.system_prompt_version!r}; use {known}"
            )
        if self.tool_call_format not in TOOL_CALL_FORMATS:
            raise ValueError(
                f"unknown tool_call_format {self.tool_call_format!r}; "
                f"use one of {TOOL_CALL_FORMATS}"
            )
        if self.tool_parser not in TOOL_PARSERS:
            raise ValueError(
                f"unknown tool_parser {self.tool_parser!r}; use one of {', '.join(TOOL_PARSERS)}"
            )
        if self.context_mode not in CONTEXT_MODES:
            raise ValueError(
                f"unknown context_mode {self.context_mode!r}; use one of {', '.join(CONTEXT_MODES)}"
            )
        if self.context_limit is not None and self.context_limit < 1:
            raise ValueError(
                f"context_limit must be a positive token count, got {self.context_limit}"
            )
        if self.termination_policy not in ("max_turns", "last_tool"):
            raise ValueError(
                f"unknown termination_policy {self.termination_policy!r}; "
                "use max_turns or last_tool"
            )


def action_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One JSON action: {"tool": name, "arguments": {...}} matching that tool's parameters."""
    options = [
        {
            "type": "object",
            "properties": {
                "tool": {"type": "string", "enum": [t["function"]["name"]]},
                "arguments": t["function"]["parameters"],
            },
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return {"anyOf": options}


class ChatPolicy:
    name = "openai"

    def __init__(
        self,
        client: ChatClient,
        tools: list[dict[str, Any]],
        config: ChatPolicyConfig | None = None,
        *,
        prefix_messages: list[dict[str, Any]] | None = None,
    ) -> None:
        self.client = client
        self.tools = tools
        self.config = config or ChatPolicyConfig()
        self.prefix_messages = list(prefix_messages or [])
        self.messages: list[dict[str, Any]] = []
        self.calls: list[tuple[int, ModelCallRecord]] = []  # the episode's, with their turns
        self._taken = 0  # calls already handed over by take_calls
        self._pending_ids: list[str] = []
        self._tokens: list[int] = []  # the last call's prompt + completion, as sampled
        self._assistant_at = -1  # index in `messages` of the last assistant reply
        self._stopped = False  # whether that reply ended on its end-of-turn token
        self._closing: list[int] | None = None  # template tokens after an assistant reply
        self._prompt_messages: list[dict[str, Any]] = []  # what the next request renders
        self._recorded_upto = 0  # append mode: messages already noted on a recorded call
        # rerender mode: the question, every WORKINGMEMORY by turn, the past turns
        self._question = ""
        self._snapshots: dict[int, str] = {}
        self._entries: list[context.Entry] = []
        self._marked = 0  # the last prompt's length, which the next marker starts from
        self.truncations: list[tuple[int, list[str]]] = []  # (turn, passes applied)

    @property
    def rerender(self) -> bool:
        return self.config.context_mode == "rerender"

    def token_counter(self) -> TokenCounter | None:
        """The policy model's tokenizer as the env's token counter, where the server has one:
        always on the token-in path and in rerender mode (both need /tokenize); None for
        plain chat completions in append mode (a server that may have no /tokenize). The
        env ignores it in rerender mode, where the policy counts its own prompt."""
        if self.config.token_in or self.rerender:
            return self._count_tokens
        return None

    def _count_tokens(self, text: str) -> int:
        # A server that cannot count cannot sample either: the estimate stands in for this
        # text, and the policy's own next call ends the episode with the server's reason.
        try:
            return self.client.count_tokens(text)
        except ModelCallError:
            return estimate_tokens(text)

    # -- Policy protocol -------------------------------------------------------------
    def reset(self, query_text: str) -> None:
        self.messages = list(self.prefix_messages) or [self._system_message()]
        self.calls, self._taken = [], 0
        self._pending_ids = []
        self._tokens, self._assistant_at, self._stopped = [], -1, False
        self._question, self._snapshots, self._entries = query_text, {}, []
        self._marked = 0
        self.truncations = []
        self._recorded_upto = 0

    def take_calls(self) -> list[tuple[int, ModelCallRecord]]:
        """The model calls made since the last take, each with its turn (`CallRecorder`)."""
        taken, self._taken = self.calls[self._taken :], len(self.calls)
        return taken

    def act(self, observation: Observation, state: Any) -> list[ToolCall]:
        if self.rerender:
            self._note_observation(observation)
        else:
            self._append_observation(observation)
        record = self._call_with_retries(observation.turn)
        return self._actions_from(record, observation.turn)

    # -- conversation ----------------------------------------------------------------
    def _system_message(self) -> dict[str, Any]:
        text = SYSTEM_PROMPTS[self.config.system_prompt_version]
        if self.config.tool_call_format == "json_schema":
            described = "\n".join(json.dumps(t["function"], sort_keys=True) for t in self.tools)
            text += (
                "\n\nReply with exactly one JSON object "
                '{"tool": <tool name>, "arguments": {...}}. The tools:\n' + described
            )
        return {"role": "system", "content": text}

    def _append_observation(self, observation: Observation) -> None:
        if not self._pending_ids or self.config.tool_call_format == "json_schema":
            self.messages.append({"role": "user", "content": observation.text})
            self._pending_ids = []
            return
        results = {r.call_id: r.content for r in observation.tool_results}
        for call_id in self._pending_ids:
            content = results.get(call_id, "(no result)")
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        self.messages.append({"role": "user", "content": observation.working_memory})
        self._pending_ids = []

    def _constraint(self) -> dict[str, Any]:
        if self.config.tool_call_format == "openai_tools":
            return {}
        schema = {"name": "action", "schema": action_schema(self.tools)}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}

    def _rendered_tools(self) -> list[dict[str, Any]] | None:
        return self.tools if self.config.tool_call_format == "openai_tools" else None

    def _template_closing(self) -> list[int]:
        """The tokens the chat template puts after an assistant reply (ChatML: end-of-turn,
        newline), found as the common tail of two renders that differ only in the reply."""
        if self._closing is None:
            probe = [{"role": "user", "content": "q"}]
            a, b = (
                self.client.tokenize_chat(
                    [*probe, {"role": "assistant", "content": text}], add_generation_prompt=False
                )
                for text in ("a", "b")
            )
            n = 0
            while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
                n += 1
            self._closing = a[len(a) - n :]
        return self._closing

    def _token_prompt(self) -> list[int]:
        """Previous prompt + sampled completion + the newly rendered turn, as token ids."""
        tools = self._rendered_tools()
        full = self.client.tokenize_chat(self.messages, tools=tools)
        if not self._tokens:
            return full
        partial = self.client.tokenize_chat(
            self.messages[: self._assistant_at + 1], tools=tools, add_generation_prompt=False
        )
        closing = self._template_closing()
        if not closing or full[: len(partial)] != partial or partial[-len(closing) :] != closing:
            # No safe splice point: send the plain rendering; reconstruction records a break.
            return full
        # A reply that stopped sampled the end-of-turn token itself; one cut off by
        # max_tokens did not, and the template's goes in as (masked) interstitial.
        if self._stopped and self._tokens[-1] == closing[0]:
            closing = closing[1:]
        return self._tokens + closing + full[len(partial) :]

    def _request(self, turn: int) -> dict[str, Any]:
        if self.rerender:
            messages, ids = self._rerender_prompt(turn)
        elif self.config.token_in:
            messages, ids = list(self.messages), self._token_prompt()
            if len(ids) > self.config.limit:
                raise PolicyStop(
                    "context_budget",
                    f"the prompt is {len(ids)} tokens, over the {self.config.limit} limit",
                )
        else:
            # A copy of the list, so later appends never alter a recorded request.
            messages, ids = list(self.messages), []
        self._prompt_messages = messages
        if self.config.token_in:
            extra = self._constraint()
            if self.config.tool_parser in NEEDS_SPECIAL_TOKENS:
                extra["skip_special_tokens"] = False  # the calls are marked by special tokens
            return self.client.build_completion_request(ids, self.config.sampling, **extra)
        if self.config.tool_call_format == "openai_tools":
            return self.client.build_request(
                messages, self.config.sampling, tools=self.tools, tool_choice="auto"
            )
        schema = {"name": "action", "schema": action_schema(self.tools)}
        return self.client.build_request(
            messages,
            self.config.sampling,
            response_format={"type": "json_schema", "json_schema": schema},
        )

    # -- rerender mode ----------------------------------------------------------------
    def _head(self) -> list[dict[str, Any]]:
        return list(self.prefix_messages) or [self._system_message()]

    def _note_observation(self, observation: Observation) -> None:
        """Keep the observation's WORKINGMEMORY and give the last reply its results."""
        self._snapshots[observation.turn] = observation.working_memory
        if not self._entries or not observation.tool_results:
            return
        entry = self._entries[-1]
        results = observation.tool_results
        if self._pending_ids and self.config.tool_call_format == "openai_tools":
            by_id = {r.call_id: r for r in results}
            entry.results = [
                context.Result(
                    by_id[i].content if i in by_id else "(no result)",
                    by_id[i].name if i in by_id else "",
                    i,
                )
                for i in self._pending_ids
            ]
        else:
            text = "\n\n".join(f"[{r.name or 'no tool'}] {r.content}" for r in results)
            entry.results = [context.Result(text, results[0].name if len(results) == 1 else "")]
        self._pending_ids = []

    def _rerender_prompt(self, turn: int) -> tuple[list[dict[str, Any]], list[int]]:
        """The prompt rebuilt from the state, counted in real tokens and narrowed by the
        truncation passes until it fits the limit; PolicyStop when it cannot fit."""
        limit = self.config.limit
        view, step, applied = context.View(), 0, []
        while True:
            # One render per narrowing step; the marker is settled only once it fits.
            messages, ids, marker = self._counted(view, renders=1)
            if len(ids) <= limit:
                messages, ids, marker = self._counted(view)
                if len(ids) <= limit:
                    break
            narrower = None
            while narrower is None and step < len(context.PASSES):
                narrower = context.narrower(view, context.PASSES[step], len(self._entries))
                if narrower is None:
                    step += 1
            if narrower is None:
                raise PolicyStop(
                    "context_budget",
                    f"the prompt is {len(ids)} tokens, over the {limit} limit after every "
                    "truncation pass",
                )
            view = narrower
            applied.append(context.PASSES[step])
        if applied:
            self.truncations.append((turn, applied))
        if self._entries:
            self._entries[-1].marker = marker
        return messages, ids

    def _counted(
        self, view: context.View, renders: int = 3
    ) -> tuple[list[dict[str, Any]], list[int], str]:
        """Render under `view` with a marker stating the prompt's own length: start from the
        last count and re-render until the number written is the one counted (a digit more
        or less can move the count; at most `renders` renders)."""
        tools = self._rendered_tools()
        used = self._marked
        for _ in range(renders):
            marker = context_marker(used, self.config.limit)
            messages, _ = context.render(
                head=self._head(),
                question=self._question,
                snapshots=self._snapshots,
                entries=self._entries,
                view=view,
                parser=self.config.tool_parser,
                marker=marker,
                cut_replies=self.config.tool_call_format == "openai_tools",
            )
            ids = self.client.tokenize_chat(messages, tools=tools)
            if len(ids) == used or not self._entries:
                break
            used = len(ids)
        self._marked = len(ids)
        return messages, ids, marker

    def _call_with_retries(self, turn: int) -> ModelCallRecord:
        for attempt in range(self.config.retries + 1):
            try:
                record = self._complete(turn)
            except ModelCallError as exc:
                if exc.record is not None:
                    self.calls.append((turn, exc.record))
                if exc.retryable and attempt < self.config.retries:
                    time.sleep(self.config.retry_backoff_s * 2**attempt)
                    continue
                raise PolicyStop(exc.kind, str(exc)) from exc
            self.calls.append((turn, record))
            self._tokens = record.prompt_token_ids + record.completion_token_ids
            self._stopped = record.finish_reason == "stop"
            return record
        raise AssertionError("unreachable: the loop returns or raises")

    def _complete(self, turn: int) -> ModelCallRecord:
        request = self._request(turn)
        try:
            record = self.client.complete(request)
        except ModelCallError as exc:
            if exc.record is not None:
                self._describe(exc.record)
            raise
        return self._describe(record)

    def _describe(self, record: ModelCallRecord) -> ModelCallRecord:
        """Note what a token-in prompt was rendered from: a rebuilt prompt's messages whole;
        in append mode only those added since the previous recorded call (the prompt is the
        concatenation up to this call), so an episode stores each message once."""
        record.rerendered = self.rerender
        if "messages" in record.request:
            return record
        if self.rerender:
            record.prompt_messages = self._prompt_messages
        else:
            record.prompt_messages = self._prompt_messages[self._recorded_upto :]
            self._recorded_upto = len(self._prompt_messages)
        return record

    # -- replies into actions --------------------------------------------------------
    def _actions_from(self, record: ModelCallRecord, turn: int) -> list[ToolCall]:
        message = record.message
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            assistant["tool_calls"] = message["tool_calls"]
        calls = self._parse(message)
        if calls and "tool_calls" not in assistant and self.config.tool_parser != "hermes":
            # gpt-oss's template will not render a tool result without the call before it.
            assistant["tool_calls"] = [_to_openai(c) for c in calls]
        if self.rerender:
            self._entries.append(context.Entry(turn=turn, reply=assistant))
        else:
            self.messages.append(assistant)
            self._assistant_at = len(self.messages) - 1
        if not calls and self.config.termination_policy == "last_tool":
            raise PolicyStop("no_tool_call", "the reply contained no tool call")
        if not calls:
            # Fed back as a format error: the harness says what was wrong next turn.
            self._pending_ids = []
            return [ToolCall(name="", arguments=assistant["content"], call_id="call_0")]
        tool_messages = self.config.tool_call_format == "openai_tools"
        self._pending_ids = [c.call_id for c in calls] if tool_messages else []
        return calls

    def _parse(self, message: dict[str, Any]) -> list[ToolCall]:
        if message.get("tool_calls"):
            return [_from_openai(i, tc) for i, tc in enumerate(message["tool_calls"])]
        content = message.get("content") or ""
        if self.config.tool_call_format == "json_schema":
            return [json_action_call(content)] if content.strip() else []
        # Token-in, or the server's parser missed a malformed call: read the raw text in the
        # model family's own syntax; what cannot be read comes back as a format error.
        return parse_tool_calls(self.config.tool_parser, content)


def _from_openai(index: int, tool_call: dict[str, Any]) -> ToolCall:
    function = tool_call.get("function") or {}
    raw = function.get("arguments", "")
    try:
        arguments: dict[str, Any] | str = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        arguments = raw
    if not isinstance(arguments, dict):
        arguments = raw if isinstance(raw, str) else json.dumps(raw)
    return ToolCall(
        name=str(function.get("name", "")),
        arguments=arguments,
        call_id=str(tool_call.get("id") or f"call_{index}"),
    )


def _to_openai(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }
