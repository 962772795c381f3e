"""An OpenAI-compatible chat policy: the harness's tools, offered to a model behind vLLM.

The conversation is append-only: each turn adds the tool results and the new
WORKINGMEMORY after what the model already saw, and nothing earlier is ever rewritten, so
every call's prompt extends the previous call's prompt plus its completion (what prefix
merging in reconstruct.py relies on).

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
        self.calls: list[tuple[int, ModelCallRecord]] = []
        self._pending_ids: list[str] = []
        self._tokens: list[int] = []  # the last call's prompt + completion, as sampled
        self._assistant_at = -1  # index in `messages` of the last assistant reply
        self._stopped = False  # whether that reply ended on its end-of-turn token
        self._closing: list[int] | None = None  # template tokens after an assistant reply

    # -- Policy protocol -------------------------------------------------------------
    def reset(self, query_text: str) -> None:
        self.messages = list(self.prefix_messages) or [self._system_message()]
        self.calls = []
        self._pending_ids = []
        self._tokens, self._assistant_at, self._stopped = [], -1, False

    def act(self, observation: Observation, state: Any) -> list[ToolCall]:
        self._append_observation(observation)
        record = self._call_with_retries(observation.turn)
        return self._actions_from(record)

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

    def _request(self) -> dict[str, Any]:
        if self.config.token_in:
            extra = self._constraint()
            if self.config.tool_parser in NEEDS_SPECIAL_TOKENS:
                extra["skip_special_tokens"] = False  # the calls are marked by special tokens
            return self.client.build_completion_request(
                self._token_prompt(), self.config.sampling, **extra
            )
        # A copy of the list, so later appends never alter a recorded request.
        messages = list(self.messages)
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

    def _call_with_retries(self, turn: int) -> ModelCallRecord:
        for attempt in range(self.config.retries + 1):
            try:
                record = self.client.complete(self._request())
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

    # -- replies into actions --------------------------------------------------------
    def _actions_from(self, record: ModelCallRecord) -> list[ToolCall]:
        message = record.message
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            assistant["tool_calls"] = message["tool_calls"]
        calls = self._parse(message)
        if calls and "tool_calls" not in assistant and self.config.tool_parser != "hermes":
            # gpt-oss's template will not render a tool result without the call before it.
            assistant["tool_calls"] = [_to_openai(c) for c in calls]
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
