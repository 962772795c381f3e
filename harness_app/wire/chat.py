"""OpenAI chat completions, the one call every proxied call becomes: pure, no HTTP.

The proxy asks vLLM for what training needs and the agent did not ask for: the prompt's
and the completion's token ids (`return_token_ids`) and the sampled tokens' logprobs
(`logprobs`, `top_logprobs: 0`). The agent must not notice, so whatever it did not ask for
is stripped from the answer again (`strip_added`), chunk by chunk when it streams
(`ChatStream`, the chat dialect's events).

A streamed answer is folded back into the non-streamed shape (`StreamFold`), so a
streamed call is stored exactly as the same call would be without streaming: one message
with its content and tool calls, one list of token ids, one list of logprobs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness_app.wire.errors import CHAT_API, ProtocolError, error_body

# Keys vLLM adds when asked for token ids; stripped unless the caller asked.
TOP_LEVEL_TOKEN_KEYS = ("prompt_token_ids",)
CHOICE_TOKEN_KEYS = ("token_ids",)


@dataclass(frozen=True)
class Asked:
    """What the caller itself asked for, so the answer can be put back to that."""

    token_ids: bool
    logprobs: bool
    stream: bool


def upstream_request(body: Any) -> tuple[dict[str, Any], Asked]:
    """The request to send upstream, and what the caller asked for.

    Raises ProtocolError for a body that is not a chat request the proxy can record.
    """
    if not isinstance(body, dict):
        raise ProtocolError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProtocolError("messages must be a non-empty list", "messages")
    if body.get("n", 1) not in (1, None):
        raise ProtocolError("the recording proxy records one choice per call; send n=1", "n")
    asked = Asked(
        token_ids=bool(body.get("return_token_ids")),
        logprobs=bool(body.get("logprobs")),
        stream=bool(body.get("stream")),
    )
    forwarded = dict(body)
    forwarded["return_token_ids"] = True
    forwarded["logprobs"] = True
    if not asked.logprobs:
        # Only the sampled token's logprob; a caller asking for logprobs keeps its own
        # top_logprobs and gets the answer whole.
        forwarded["top_logprobs"] = 0
    return forwarded, asked


def strip_added(payload: dict[str, Any], asked: Asked) -> dict[str, Any]:
    """A response (or one stream chunk) with what the proxy added taken out, in place.

    vLLM answers `"prompt_token_ids": null` and `"token_ids": null` when not asked for
    them, so a present key is nulled rather than dropped: the agent gets the very shape it
    would have got without the proxy.
    """
    if not asked.token_ids:
        for key in TOP_LEVEL_TOKEN_KEYS:
            if key in payload:
                payload[key] = None
    for choice in payload.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if not asked.token_ids:
            for key in CHOICE_TOKEN_KEYS:
                if key in choice:
                    choice[key] = None
        if not asked.logprobs and "logprobs" in choice:
            choice["logprobs"] = None
    return payload


def needs_stripping(asked: Asked) -> bool:
    return not (asked.token_ids and asked.logprobs)


def agent_fingerprint(messages: Any) -> str:
    """Twelve hex digits of the system prompt's SHA-256: the same agent, the same value.

    Subagents are told apart from their parent by their own system prompt. Content given
    as a list of parts is hashed in its JSON form.
    """
    system: Any = ""
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and message.get("role") in ("system", "developer"):
                system = message.get("content") or ""
                break
    text = system if isinstance(system, str) else json.dumps(system, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def first_choice(chat: Mapping[str, Any]) -> Mapping[str, Any]:
    """A chat answer's (or chunk's) first choice; {} when it has none."""
    choices = chat.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def ids_count(ids: Any) -> int:
    """How many token ids a field of vLLM's answer holds (0 when it holds none)."""
    return len(ids) if isinstance(ids, list) else 0


@dataclass
class StreamFold:
    """Folds SSE chunks into the response the same call would have got without streaming."""

    head: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] | None = None
    # Cut out of the first chunk as raw JSON; tokens_of(prompt_ids_json=…) decodes it.
    prompt_ids_json: bytes | None = None
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: Any = None
    usage: dict[str, Any] | None = None
    done: bool = False

    def feed(self, chunk: Mapping[str, Any]) -> None:
        if not self.head:
            self.head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.prompt_ids = chunk["prompt_token_ids"]  # 32,000 ids: no copy
        if chunk.get("usage"):
            self.usage = dict(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._feed_choice(choice)

    def _feed_choice(self, choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self.content.append(str(delta["content"]))
        for key in ("reasoning_content", "reasoning"):
            if delta.get(key):
                self.reasoning.append(str(delta[key]))
        for part in delta.get("tool_calls") or []:
            self._feed_tool_call(part)
        self.token_ids.extend(int(t) for t in choice.get("token_ids") or [])
        self.logprobs.extend((choice.get("logprobs") or {}).get("content") or [])
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
            self.stop_reason = choice.get("stop_reason")

    def _feed_tool_call(self, part: Mapping[str, Any]) -> None:
        call = self.tool_calls.setdefault(
            int(part.get("index", 0)),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if part.get("id"):
            call["id"] = part["id"]
        if part.get("type"):
            call["type"] = part["type"]
        function = part.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def response(self) -> dict[str, Any]:
        """The folded response: chat.completion shaped, with the token fields vLLM gives."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": {"content": self.logprobs},
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
            "token_ids": self.token_ids,
        }
        folded: dict[str, Any] = {**self.head, "object": "chat.completion", "choices": [choice]}
        if self.prompt_ids is not None:
            folded["prompt_token_ids"] = self.prompt_ids
        if self.usage is not None:
            folded["usage"] = self.usage
        return folded


class ChatStream:
    """The chat dialect's events: the upstream's, one for one, less what the proxy added.

    An event that needs nothing taken out goes on as the bytes vLLM sent.
    """

    def __init__(self, asked: Asked) -> None:
        self.asked = asked
        # The prompt's ids are left in the chunks only when the caller asked for them.
        self.keeps_prompt_ids = asked.token_ids

    def feed(self, chunk: dict[str, Any], event: bytes, prompt_tokens: int | None) -> bytes:
        if not needs_stripping(self.asked):
            return event + b"\n\n"
        return b"data: " + orjson.dumps(strip_added(chunk, self.asked)) + b"\n\n"

    def other(self, event: bytes) -> bytes:
        """An event with no chunk in it (a comment, data that is not JSON), as it came."""
        return event + b"\n\n"

    def finish(self, event: bytes) -> bytes:
        return event + b"\n\n"

    def error(self, message: str) -> bytes:
        # vLLM's own mid-stream error event (the openai client raises APIError on it); no
        # [DONE] after it, so a client that skips error events still sees the stream cut off.
        body = error_body(CHAT_API, 502, f"the model server broke off: {message}", "api_error")
        return b"data: " + orjson.dumps(body) + b"\n\n"
