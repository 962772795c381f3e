"""Chat completions answers translated to Anthropic Messages answers: pure, no HTTP.

The other half of request.py: the chat answer vLLM gives becomes a Messages answer, whole
(`messages_response_from_chat`) or as Anthropic's server-sent events, one vLLM chunk at
a time (`MessagesStream`). Token ids and logprobs never reach the agent: the translation
only reads the message, the finish and the usage.

Choices where the two APIs differ (docs/proxy.md says the same for readers):
- Tool arguments that are not a JSON object become the input `{}` (whole and streamed
  alike), so a client never fails on the model's malformed JSON; the chat answer the proxy
  records keeps the raw text.
- A streamed tool call's arguments are held back and sent as one `input_json_delta` when
  its block closes: only then is it known whether they parse.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from harness_app.wire.chat import first_choice, ids_count
from harness_app.wire.errors import MESSAGES_API, error_body, error_message

# --- whole response ------------------------------------------------------------------------


def messages_response_from_chat(chat: Mapping[str, Any], *, model: str) -> dict[str, Any]:
    """A whole chat.completion (as vLLM answers it, possibly still carrying prompt_token_ids /
    choices[0].token_ids / logprobs) -> an Anthropic `message` object. Never leaks token ids
    or logprobs."""
    choice = first_choice(chat)
    message = choice.get("message") or {}
    msg_id = _message_id(chat.get("id"))
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        content.append({"type": "thinking", "thinking": str(reasoning), "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": str(message["content"])})
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    for i, call in enumerate(calls):
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or _tool_use_id(msg_id, i),
                "name": str(function.get("name") or ""),
                "input": orjson.loads(_tool_input_json(function.get("arguments"))),
            }
        )
    usage = chat.get("usage") or {}
    stop_reason, stop_sequence = _stop(
        choice.get("finish_reason"), choice.get("stop_reason"), bool(calls)
    )
    counts = _usage(
        usage.get("prompt_tokens") or ids_count(chat.get("prompt_token_ids")),
        usage.get("completion_tokens") or ids_count(choice.get("token_ids")),
    )
    message = _message(msg_id, model, content, counts)
    return message | {"stop_reason": stop_reason, "stop_sequence": stop_sequence}


def _message(msg_id: str, model: str, content: list[Any], usage: dict[str, int]) -> dict[str, Any]:
    """A message with no stop reason yet, as message_start sends it."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }


def _message_id(chat_id: Any) -> str:
    if isinstance(chat_id, str) and chat_id:
        return "msg_" + chat_id.removeprefix("chatcmpl-")
    return "msg_" + uuid.uuid4().hex


def _tool_use_id(msg_id: str, index: int) -> str:
    # vLLM always names its tool calls; this is for a server that does not.
    return f"toolu_{msg_id.removeprefix('msg_')}_{index}"


def _tool_input_json(arguments: Any) -> str:
    """The arguments as JSON object text: the model's own text when it is one, else "{}"."""
    if isinstance(arguments, dict):
        return orjson.dumps(arguments).decode()
    if isinstance(arguments, str):
        try:
            if isinstance(orjson.loads(arguments), dict):
                return arguments
        except orjson.JSONDecodeError:
            pass
    return "{}"


def _stop(finish: Any, matched: Any, has_tool_calls: bool) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for vLLM's finish_reason and stop_reason
    (the matched stop string, or the id of a stop token, or None at EOS)."""
    if finish == "length":
        return "max_tokens", None
    if finish == "tool_calls" or has_tool_calls:
        return "tool_use", None
    if isinstance(matched, str):
        return "stop_sequence", matched
    return "end_turn", None


# vLLM's prefix cache is not billed apart: both cache counts stay 0.
_NO_CACHE = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, **_NO_CACHE}


# --- stream --------------------------------------------------------------------------------


_DELTA = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":%b}\n\n'
)


def _event(name: str, **data: Any) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (name.encode(), orjson.dumps({"type": name, **data}))


class _ToolBlock:
    """A streamed tool call: started once its name is known, arguments held to the end."""

    __slots__ = ("arguments", "call_id", "chat_index", "started")

    def __init__(self, chat_index: int) -> None:
        self.chat_index = chat_index
        self.call_id = ""
        self.arguments: list[str] = []
        self.started = False


class MessagesStream:
    """Turns vLLM chat.completion.chunk dicts into Anthropic SSE bytes, one chunk at a time.

    A new block starts whenever the kind of delta changes (thinking, text, tool call) or a
    new tool call index appears; the open block closes when the next one starts.
    """

    def __init__(self, *, model: str) -> None:
        self.model = model
        self.msg_id = ""
        self.started = self.finished = self.has_tool_calls = False
        self.block: str | None = None  # "thinking", "text", "tool" or None
        self.index = -1  # the Anthropic index of the open (or last) block
        self.tool: _ToolBlock | None = None
        self.input_tokens = self.output_tokens = 0
        self.usage: Mapping[str, Any] = {}
        self.finish_reason: Any = None
        self.matched: Any = None

    def feed(self, chunk: Mapping[str, Any]) -> bytes:
        """b"" when nothing is to be sent yet, else one or more whole SSE events."""
        if self.finished:
            return b""
        if "error" in chunk:
            # vLLM reports a failure after the stream has started as a chunk of its own.
            return self.error(error_message(chunk) or "the model server failed midway")
        out: list[bytes] = []
        if not self.started:
            out.append(self._start(chunk))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            self._feed_delta(choice.get("delta") or {}, out)
            self.output_tokens += ids_count(choice.get("token_ids"))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.matched = choice.get("stop_reason")
        return b"".join(out)

    def _start(self, chunk: Mapping[str, Any]) -> bytes:
        # With return_token_ids, vLLM's first chunk carries the prompt's ids.
        self.started = True
        self.msg_id = _message_id(chunk.get("id"))
        usage = chunk.get("usage") or {}
        self.input_tokens = (
            ids_count(chunk.get("prompt_token_ids")) or usage.get("prompt_tokens") or 0
        )
        message = _message(self.msg_id, self.model, [], _usage(self.input_tokens, 0))
        return _event("message_start", message=message) + _event("ping")

    def _feed_delta(self, delta: Mapping[str, Any], out: list[bytes]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""}, out)
            out.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
        if delta.get("content"):
            self._open("text", {"type": "text", "text": ""}, out)
            out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for part in delta.get("tool_calls") or ():
            self._feed_tool_part(part, out)

    def _open(self, kind: str, block: dict[str, Any], out: list[bytes]) -> None:
        if self.block != kind:
            self._close(out)
            self.block = kind
            self._start_block(block, out)

    def _start_block(self, block: dict[str, Any], out: list[bytes]) -> None:
        self.index += 1
        out.append(_event("content_block_start", index=self.index, content_block=block))

    def _delta(self, delta: dict[str, Any]) -> bytes:
        # The one event sent per token: its frame is formatted, not built as a dict.
        return _DELTA % (self.index, orjson.dumps(delta))

    def _feed_tool_part(self, part: Mapping[str, Any], out: list[bytes]) -> None:
        chat_index = int(part.get("index", 0))
        tool = self.tool
        if self.block != "tool" or tool is None or tool.chat_index != chat_index:
            self._close(out)
            self.block, self.has_tool_calls = "tool", True
            tool = self.tool = _ToolBlock(chat_index)
        function = part.get("function") or {}
        if part.get("id") and not tool.call_id:
            tool.call_id = str(part["id"])
        if function.get("arguments"):
            tool.arguments.append(str(function["arguments"]))
        if function.get("name") and not tool.started:
            # OpenAI-style streams send the name whole, in the call's first piece.
            self._start_tool(tool, str(function["name"]), out)

    def _start_tool(self, tool: _ToolBlock, name: str, out: list[bytes]) -> None:
        tool.started = True
        call_id = tool.call_id or _tool_use_id(self.msg_id, self.index + 1)
        self._start_block({"type": "tool_use", "id": call_id, "name": name, "input": {}}, out)

    def _close(self, out: list[bytes]) -> None:
        if self.block is None:
            return
        if self.tool is not None:
            if not self.tool.started:
                self._start_tool(self.tool, "", out)
            partial = _tool_input_json("".join(self.tool.arguments))
            out.append(self._delta({"type": "input_json_delta", "partial_json": partial}))
            self.tool = None
        out.append(_event("content_block_stop", index=self.index))
        self.block = None

    def finish(self) -> bytes:
        """At the chat stream's [DONE]: closes the open block, then message_delta (stop
        reason, usage) and message_stop."""
        if self.finished:
            return b""
        out = [] if self.started else [self._start({})]
        self._close(out)
        self.finished = True
        usage = _usage(
            int(self.usage.get("prompt_tokens") or self.input_tokens),
            int(self.usage.get("completion_tokens") or self.output_tokens),
        )
        stop_reason, stop_sequence = _stop(self.finish_reason, self.matched, self.has_tool_calls)
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        out.append(_event("message_delta", delta=delta, usage=usage))
        out.append(_event("message_stop"))
        return b"".join(out)

    def error(self, message: str) -> bytes:
        """An Anthropic `event: error` for a stream that broke midway; nothing follows it."""
        self.finished = True
        return _event("error", error=error_body(MESSAGES_API, 500, message, "api_error")["error"])
