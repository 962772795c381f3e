"""The recording proxy's view of the OpenAI chat protocol: pure functions, no HTTP, no Django.

The proxy (trajectories/proxy.py) asks vLLM for what training needs and the agent did not
ask for: the prompt's and the completion's token ids (`return_token_ids`) and the sampled
tokens' logprobs (`logprobs`, `top_logprobs: 0`). The agent must not notice, so whatever
it did not ask for is stripped from the answer again, chunk by chunk when it streams.

A streamed answer is folded back into the non-streamed shape (`StreamFold`), so a
streamed call is stored exactly as the same call would be without streaming: one message
with its content and tool calls, one list of token ids, one list of logprobs.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Keys vLLM adds when asked for token ids; stripped unless the caller asked.
TOP_LEVEL_TOKEN_KEYS = ("prompt_token_ids",)
CHOICE_TOKEN_KEYS = ("token_ids",)


class ProtocolError(ValueError):
    """A request the proxy will not forward; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


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


@dataclass(frozen=True)
class CallTokensFound:
    """A call's token capture, as the int32 and float32 arrays it is stored in."""

    prompt_ids: array[int]
    completion_ids: array[int]
    logprobs: array[float]
    problem: str  # "" when the token capture is whole


def tokens_of(
    response: Mapping[str, Any], *, prompt_ids_json: bytes | None = None
) -> CallTokensFound:
    """Token ids and sampled logprobs from a (folded) chat completion response.

    `prompt_ids_json` is the prompt's id list as the raw JSON cut out of the answer
    (`cut_prompt_ids`), when it was. The arrays check the ids in C: a prompt of 8,000 ids
    costs 0.14 ms instead of the 0.35 ms of converting each one in Python, and this runs
    while the agent waits.
    """
    choice = (response.get("choices") or [{}])[0] or {}
    prompt = response.get("prompt_token_ids")
    completion = choice.get("token_ids")
    content = (choice.get("logprobs") or {}).get("content")
    has_prompt = prompt_ids_json is not None or isinstance(prompt, list)
    if not has_prompt or not isinstance(completion, list):
        return _no_tokens("token_capture_missing: the server returned no ids")
    try:
        if prompt_ids_json is not None:
            prompt_ids = ids_from_json(prompt_ids_json)
        else:
            prompt_ids = array("i", prompt or [])
        completion_ids = array("i", completion)
        logprobs = array("f", [item.get("logprob", 0.0) for item in content or []])
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        return _no_tokens(f"token_capture_malformed: {exc}")
    problem = ""
    if len(logprobs) != len(completion_ids):
        problem = (
            f"token_count_mismatch: {len(completion_ids)} completion tokens "
            f"but {len(logprobs)} logprobs"
        )
    return CallTokensFound(prompt_ids, completion_ids, logprobs, problem)


INT32 = np.iinfo(np.int32)


def ids_from_json(raw: bytes) -> array[int]:
    """A JSON list of token ids as the int32 array it is stored in.

    numpy reads the text straight into integers: 32,000 ids cost about 0.5 ms, against
    1.2 ms for orjson's list of Python ints and the array built from it (bench_proxy's
    32k-token calls). ValueError for anything but a flat list of integers.
    """
    body = raw.strip()
    if body[:1] != b"[" or body[-1:] != b"]":
        raise ValueError("the prompt ids are not a JSON list")
    body = body[1:-1]
    ids = array("i")
    if not body.strip():
        return ids
    parsed = np.fromstring(body, dtype=np.int64, sep=",")
    if len(parsed) != body.count(b",") + 1:
        raise ValueError("the prompt ids are not a list of integers")
    if parsed.min() < INT32.min or parsed.max() > INT32.max:
        raise OverflowError("a prompt id is out of the int32 range")
    ids.frombytes(parsed.astype(np.int32).tobytes())
    return ids


def _no_tokens(problem: str) -> CallTokensFound:
    return CallTokensFound(array("i"), array("i"), array("f"), problem)


PROMPT_IDS_KEY = b'"prompt_token_ids":'


def cut_prompt_ids(data: bytes) -> tuple[bytes | None, bytes]:
    """A stream chunk's prompt id list as raw JSON, and the chunk with `null` in its place.

    vLLM sends the prompt's ids once, in the first chunk: 32,000 ids are 200 KB of JSON.
    Decoding them (0.4 ms) before the first event goes out would delay the agent's first
    byte, so the list is cut out as bytes and decoded when the call is stored. A chunk
    without a list comes back whole.
    """
    at = data.find(PROMPT_IDS_KEY)
    if at < 0:
        return None, data
    start = at + len(PROMPT_IDS_KEY)
    while data[start : start + 1] == b" ":
        start += 1
    if data[start : start + 1] != b"[":
        return None, data
    end = data.find(b"]", start)
    if end < 0:
        return None, data
    return data[start : end + 1], data[:start] + b"null" + data[end + 1 :]


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


class SseSplitter:
    """Complete SSE events from a stream's pieces, scanning each byte once.

    vLLM's first event carries the prompt's ids (200 KB for 32,000) and arrives in
    several reads; re-splitting the whole buffer at each read cost 0.3 ms before the
    agent's first event could leave. A stream that uses CRLF line ends is split the
    plain way (`sse_events`).
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.scanned = 0  # where the next search for a terminator starts
        self.crlf = False

    def feed(self, piece: bytes) -> list[bytes]:
        self.buffer += piece
        if self.crlf or b"\r" in piece:
            self.crlf = True
            whole, rest = sse_events(bytes(self.buffer))
            self.buffer = bytearray(rest)
            return whole
        events: list[bytes] = []
        start = 0
        while (end := self.buffer.find(b"\n\n", max(self.scanned, start))) >= 0:
            event = bytes(self.buffer[start:end])
            if event.strip():
                events.append(event)
            start = end + 2
        del self.buffer[:start]
        self.scanned = max(len(self.buffer) - 1, 0)
        return events

    def rest(self) -> bytes:
        return bytes(self.buffer)


def sse_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (without their blank-line terminator) and the unfinished rest."""
    events = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
    return [e for e in events[:-1] if e.strip()], events[-1]


def sse_data(event: bytes) -> bytes | None:
    """The data of an event ("[DONE]" included), or None for comments and other fields."""
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None
