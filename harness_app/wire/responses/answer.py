"""Chat completions answers translated to OpenAI Responses answers: pure, no HTTP.

The other half of request.py: the chat answer vLLM gives becomes a Responses `response`,
whole (`responses_response_from_chat`) or as the Responses API's server-sent events, one
vLLM chunk at a time (`ResponsesStream`). Token ids and logprobs never reach the agent:
the translation only reads the message, the finish and the usage.

Choices where the two APIs differ (docs/proxy.md says the same for readers):
- A custom tool's calls come back as custom_tool_call items carrying the string the model
  wrote as its `input` (request.py turns a custom tool into a function tool).
- A streamed custom tool call's input is held back and sent as one delta when the call
  ends: the model writes it as JSON arguments, whose string is known only when whole.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from harness_app.wire.chat import first_choice, ids_count
from harness_app.wire.errors import error_message

# --- whole response ------------------------------------------------------------------------


def responses_response_from_chat(
    chat: Mapping[str, Any], *, model: str, request: Mapping[str, Any]
) -> dict[str, Any]:
    """A whole chat.completion (as vLLM answers it, possibly still carrying prompt_token_ids /
    choices[0].token_ids / logprobs) -> a Responses `response` object (request = the caller's
    Responses request, for echoed fields like instructions/tools/custom tool kinds). Never
    leaks token ids or logprobs."""
    choice = first_choice(chat)
    message = choice.get("message") or {}
    base = _base_id(chat.get("id"))
    custom = _custom_tool_names(request)
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        output.append(_reasoning_item(f"rs_{base}_0", str(reasoning)))
    if message.get("content"):
        output.append(_message_item(f"msg_{base}_{len(output)}", str(message["content"])))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            function = call.get("function") or {}
            name, arguments = str(function.get("name") or ""), function.get("arguments")
            call_id = str(call.get("id") or f"call_{base}_{len(output)}")
            output.append(_call_item(base, len(output), call_id, name, arguments, custom))
    usage = chat.get("usage") or {}
    counts = _usage(
        int(usage.get("prompt_tokens") or ids_count(chat.get("prompt_token_ids"))),
        int(usage.get("completion_tokens") or ids_count(choice.get("token_ids"))),
    )
    response = _response(f"resp_{base}", model, request, output, counts)
    response["created_at"] = int(chat.get("created") or response["created_at"])
    return _with_status(response, choice.get("finish_reason"))


def _response(
    resp_id: str,
    model: str,
    request: Mapping[str, Any],
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """A response in progress, echoing what the caller asked for."""
    response = {
        "id": resp_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "store": False,
        "temperature": request.get("temperature"),
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "usage": usage,
    }
    text = "".join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )
    if text:
        response["output_text"] = text
    return response


def _with_status(response: dict[str, Any], finish_reason: Any) -> dict[str, Any]:
    if finish_reason == "length":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        response["status"] = "completed"
    return response


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if text else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content}


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [_output_text(text)] if status == "completed" else []
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _call_item(
    base: str, index: int, call_id: str, name: str, arguments: Any, custom: set[str]
) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    if name in custom:
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{base}_{index}",
            "call_id": call_id,
            "name": name,
            "input": custom_tool_input(text),
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": f"fc_{base}_{index}",
        "call_id": call_id,
        "name": name,
        "arguments": text,
        "status": "completed",
    }


def custom_tool_input(arguments: str) -> str:
    """The freeform input of a custom tool call from its chat arguments: the `input` string
    of {"input": ...}, else the model's text as it wrote it (a model that skipped the JSON
    still gets its patch through)."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return str(parsed["input"])
    return arguments


def _custom_tool_names(request: Mapping[str, Any]) -> set[str]:
    tools = request.get("tools")
    if not isinstance(tools, list):
        return set()
    return {
        str(t.get("name"))
        for t in tools
        if isinstance(t, dict) and t.get("type") == "custom" and t.get("name")
    }


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    # vLLM's prefix cache is not reported apart, and the student's reasoning is not counted.
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _base_id(chat_id: Any) -> str:
    if isinstance(chat_id, str) and chat_id.isascii() and chat_id.isprintable() and chat_id:
        return chat_id.removeprefix("chatcmpl-").replace('"', "").replace("\\", "")
    return uuid.uuid4().hex


# --- stream --------------------------------------------------------------------------------


# The one event sent per token: its frame is formatted, not built as a dict.
_TEXT_DELTA = (
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta","sequence_number":%d,"item_id":%b,'
    b'"output_index":%d,"content_index":0,"delta":%b,"logprobs":[]}\n\n'
)
_DELTA = (
    b'event: %b\ndata: {"type":"%b","sequence_number":%d,"item_id":%b,'
    b'"output_index":%d,%b"delta":%b}\n\n'
)


class _Item:
    """An output item being streamed: reasoning, message or a tool call."""

    __slots__ = ("call_id", "chat_index", "custom", "index", "item_id", "kind", "name", "pieces")

    def __init__(self, kind: str, item_id: str, index: int, chat_index: int = -1) -> None:
        self.kind, self.item_id, self.index, self.chat_index = kind, item_id, index, chat_index
        self.call_id = self.name = ""
        self.custom = False
        self.pieces: list[str] = []


class ResponsesStream:
    """Turns vLLM chat.completion.chunk dicts into Responses API SSE bytes, one chunk at a
    time. A new output item starts whenever the kind of delta changes (reasoning, text, tool
    call) or a new tool call index appears; the open item closes when the next one starts."""

    def __init__(self, *, model: str, request: Mapping[str, Any]) -> None:
        self.model, self.request = model, request
        self.custom = _custom_tool_names(request)
        self.base = ""
        self.created_at = 0
        self.sequence = 0
        self.started = self.finished = False
        self.item: _Item | None = None
        self.item_id_json = b'""'
        self.output: list[dict[str, Any]] = []
        self.input_tokens = self.output_tokens = 0
        self.usage: Mapping[str, Any] = {}
        self.finish_reason: Any = None

    def feed(self, chunk: Mapping[str, Any]) -> bytes:
        """b"" when nothing is to be sent yet, else one or more whole SSE events."""
        if self.finished:
            return b""
        if "error" in chunk:
            # vLLM reports a failure after the stream has started as a chunk of its own.
            return self.error(error_message(chunk) or "the model server failed midway")
        out: list[bytes] = []
        if not self.started:
            self._start(chunk, out)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            self._feed_delta(choice.get("delta") or {}, out)
            self.output_tokens += ids_count(choice.get("token_ids"))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return b"".join(out)

    def _event(self, name: str, **data: Any) -> bytes:
        self.sequence += 1
        payload = orjson.dumps({"type": name, "sequence_number": self.sequence - 1, **data})
        return b"event: %b\ndata: %b\n\n" % (name.encode(), payload)

    def _start(self, chunk: Mapping[str, Any], out: list[bytes]) -> None:
        # With return_token_ids, vLLM's first chunk carries the prompt's ids.
        self.started = True
        self.base = _base_id(chunk.get("id"))
        self.created_at = int(chunk.get("created") or time.time())
        self.input_tokens = ids_count(chunk.get("prompt_token_ids"))
        response = self._response(None)
        out.append(self._event("response.created", response=response))
        out.append(self._event("response.in_progress", response=response))

    def _response(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        response = _response(
            f"resp_{self.base}", self.model, self.request, list(self.output), usage
        )
        response["created_at"] = self.created_at
        return response

    def _feed_delta(self, delta: Mapping[str, Any], out: list[bytes]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            item = self._open("reasoning", out)
            item.pieces.append(reasoning)
            out.append(
                self._delta(item, "response.reasoning_text.delta", b'"content_index":0,', reasoning)
            )
        content = delta.get("content")
        if content:
            item = self._open("message", out)
            item.pieces.append(content)
            self.sequence += 1
            text = orjson.dumps(content)
            out.append(_TEXT_DELTA % (self.sequence - 1, self.item_id_json, item.index, text))
        for part in delta.get("tool_calls") or ():
            self._feed_tool_part(part, out)

    def _delta(self, item: _Item, name: str, extra: bytes, piece: str) -> bytes:
        self.sequence += 1
        kind = name.encode()
        sequence, index = self.sequence - 1, item.index
        return _DELTA % (kind, kind, sequence, self.item_id_json, index, extra, orjson.dumps(piece))

    def _open(self, kind: str, out: list[bytes]) -> _Item:
        if self.item is not None and self.item.kind == kind:
            return self.item
        self._close(out)
        index = len(self.output)
        prefix = "rs" if kind == "reasoning" else "msg"
        item = self._set_item(_Item(kind, f"{prefix}_{self.base}_{index}", index))
        if kind == "reasoning":
            added = _reasoning_item(item.item_id, "")
        else:
            added = _message_item(item.item_id, "", status="in_progress")
        out.append(self._event("response.output_item.added", output_index=index, item=added))
        if kind == "message":
            out.append(self._part_event("response.content_part.added", item, ""))
        return item

    def _set_item(self, item: _Item) -> _Item:
        self.item = item
        self.item_id_json = orjson.dumps(item.item_id)
        return item

    def _part_event(self, name: str, item: _Item, text: str) -> bytes:
        return self._event(
            name,
            item_id=item.item_id,
            output_index=item.index,
            content_index=0,
            part=_output_text(text),
        )

    def _feed_tool_part(self, part: Mapping[str, Any], out: list[bytes]) -> None:
        chat_index = int(part.get("index", 0))
        item = self.item
        if item is None or item.kind != "call" or item.chat_index != chat_index:
            self._close(out)
            index = len(self.output)
            item = self._set_item(_Item("call", "", index, chat_index))
        function = part.get("function") or {}
        if part.get("id") and not item.call_id:
            item.call_id = str(part["id"])
        if function.get("name") and not item.name:
            # OpenAI-style streams send the name whole, in the call's first piece.
            self._start_call(item, str(function["name"]), out)
        arguments = function.get("arguments")
        if arguments:
            if not item.name:
                self._start_call(item, "", out)
            item.pieces.append(arguments)
            if not item.custom:  # a custom tool's input is sent whole when the call ends
                name = "response.function_call_arguments.delta"
                out.append(self._delta(item, name, b"", arguments))

    def _start_call(self, item: _Item, name: str, out: list[bytes]) -> None:
        item.name, item.custom = name, name in self.custom
        item.call_id = item.call_id or f"call_{self.base}_{item.index}"
        item.item_id = f"{'ctc' if item.custom else 'fc'}_{self.base}_{item.index}"
        self.item_id_json = orjson.dumps(item.item_id)
        added = _call_item(self.base, item.index, item.call_id, name, "", self.custom)
        added["status"] = "in_progress"
        out.append(self._event("response.output_item.added", output_index=item.index, item=added))

    def _close(self, out: list[bytes]) -> None:
        item = self.item
        if item is None:
            return
        self.item = None
        text = "".join(item.pieces)
        where = {"item_id": item.item_id, "output_index": item.index}
        if item.kind == "reasoning":
            out.append(
                self._event("response.reasoning_text.done", **where, content_index=0, text=text)
            )
            done = _reasoning_item(item.item_id, text)
        elif item.kind == "message":
            out.append(
                self._event(
                    "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
                )
            )
            out.append(self._part_event("response.content_part.done", item, text))
            done = _message_item(item.item_id, text)
        else:
            if not item.name:
                self._start_call(item, "", out)
            done = _call_item(self.base, item.index, item.call_id, item.name, text, self.custom)
            if item.custom:
                self.item_id_json = orjson.dumps(item.item_id)
                delta = "response.custom_tool_call_input.delta"
                out.append(self._delta(item, delta, b"", done["input"]))
                out.append(
                    self._event(
                        "response.custom_tool_call_input.done", **where, input=done["input"]
                    )
                )
            else:
                name = "response.function_call_arguments.done"
                out.append(self._event(name, **where, arguments=text))
        self.output.append(done)
        out.append(self._event("response.output_item.done", output_index=item.index, item=done))

    def finish(self) -> bytes:
        """At the chat stream's [DONE]: closes the open item, then response.completed (or
        response.incomplete when the answer ran out of tokens) with the whole response."""
        if self.finished:
            return b""
        out: list[bytes] = []
        if not self.started:
            self._start({}, out)
        self._close(out)
        self.finished = True
        usage = _usage(
            int(self.usage.get("prompt_tokens") or self.input_tokens),
            int(self.usage.get("completion_tokens") or self.output_tokens),
        )
        response = _with_status(self._response(usage), self.finish_reason)
        name = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        out.append(self._event(name, response=response))
        return b"".join(out)

    def error(self, message: str) -> bytes:
        """A `response.failed` event for a stream that broke midway; nothing follows it."""
        if self.finished:
            return b""
        out: list[bytes] = []
        if not self.started:
            self._start({}, out)
        self.finished = True
        response = self._response(None)
        response["status"] = "failed"
        response["error"] = {"code": "server_error", "message": message}
        out.append(self._event("response.failed", response=response))
        return b"".join(out)
