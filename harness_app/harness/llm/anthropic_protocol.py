"""The Anthropic Messages API, translated to and from OpenAI chat completions: pure, no HTTP.

Claude Code speaks `POST /v1/messages`. The recording proxy does not forward that: it turns
the request into a chat completions request (`chat_request_from_messages`), sends it to vLLM
the proven way (token ids and logprobs captured by proxy_protocol.py), and turns the chat
answer back into a Messages answer, whole (`messages_response_from_chat`) or as Anthropic's
server-sent events, one vLLM chunk at a time (`MessagesStream`). Token ids and logprobs
never reach the agent: the translation only reads the message, the finish and the usage.

Choices where the two APIs differ (docs/proxy.md says the same for readers):
- Lists of text blocks (system, user, assistant, tool results) become one string, joined
  with BLOCK_SEPARATOR; the text itself is kept exact.
- Thinking blocks in the history are dropped, tool results lose `is_error` (chat has no
  field for it; Claude Code's error text says so itself), server tools are dropped.
- Tool arguments that are not a JSON object become the input `{}` (whole and streamed
  alike), so a client never fails on the model's malformed JSON; the chat answer the proxy
  records keeps the raw text.
- A streamed tool call's arguments are held back and sent as one `input_json_delta` when
  its block closes: only then is it known whether they parse.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from harness_app.harness.llm.proxy_protocol import ProtocolError

# Joins the text blocks of one system prompt, message or tool result.
BLOCK_SEPARATOR = "\n\n"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",  # vLLM answers 503 while it cannot take the request
    529: "overloaded_error",
}

# Keys of a Messages request that have no chat counterpart and are ignored on purpose:
# thinking (SmolLM2 does not reason), metadata, context_management, betas, service_tier,
# container, mcp_servers; cache_control on any block (vLLM caches prefixes by itself).
_SAMPLING = {"temperature": (int, float), "top_p": (int, float), "top_k": (int,)}


# --- request ---------------------------------------------------------------------------


def chat_request_from_messages(body: Any) -> dict[str, Any]:
    """Anthropic Messages request -> OpenAI chat completions request (what vLLM gets, before
    the proxy adds return_token_ids/logprobs).

    Raises ProtocolError naming the offending field for a request it cannot translate.
    """
    if not isinstance(body, dict):
        raise ProtocolError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError("model must be a non-empty string", "model")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ProtocolError("max_tokens is required: a positive integer", "max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProtocolError("messages must be a non-empty list", "messages")
    chat: dict[str, Any] = {"model": model, "messages": [], "max_tokens": max_tokens}
    system = _system_text(body.get("system"))
    if system:
        chat["messages"].append({"role": "system", "content": system})
    for i, message in enumerate(messages):
        chat["messages"].extend(_chat_messages(message, f"messages[{i}]"))
    _sampling(body, chat)
    _tools(body, chat)
    if messages[-1].get("role") == "assistant":
        # A trailing assistant message is Anthropic's prefill: the answer continues it.
        chat["continue_final_message"] = True
        chat["add_generation_prompt"] = False
    return chat


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    for key, kinds in _SAMPLING.items():
        value = body.get(key)
        if value is not None:
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise ProtocolError(f"{key} must be a number", key)
            chat[key] = value
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise ProtocolError("stop_sequences must be a list of strings", "stop_sequences")
        if stop:
            chat["stop"] = list(stop)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ProtocolError("stream must be true or false", "stream")
    chat["stream"] = stream
    if stream:
        # The usage chunk gives message_delta its output token count.
        chat["stream_options"] = {"include_usage": True}


def _system_text(system: Any, where: str = "system") -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        raise ProtocolError(f"{where} must be a string or a list of text blocks", where)
    return BLOCK_SEPARATOR.join(
        _text_block(block, f"{where}[{i}]") for i, block in enumerate(system)
    )


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise ProtocolError(f"{where} must be a text block", where)
    text = block.get("text")
    if not isinstance(text, str):
        raise ProtocolError(f"{where}.text must be a string", f"{where}.text")
    return text


def _blocks(message: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """The message's content as (path, block) pairs; a string is one text block."""
    content = message.get("content")
    if isinstance(content, str):
        return [(f"{where}.content", {"type": "text", "text": content})]
    if not isinstance(content, list):
        raise ProtocolError(
            f"{where}.content must be a string or a list of blocks", f"{where}.content"
        )
    pairs = []
    for j, block in enumerate(content):
        path = f"{where}.content[{j}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise ProtocolError(f"{path} must be a block with a type", path)
        pairs.append((path, block))
    return pairs


def _chat_messages(message: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(message, dict):
        raise ProtocolError(f"{where} must be an object", where)
    role = message.get("role")
    if role == "user":
        return _user_messages(_blocks(message, where))
    if role == "assistant":
        return [_assistant_message(_blocks(message, where))]
    if role == "system":  # Claude Code 2.1's environment notes, between turns
        return [{"role": "system", "content": _system_text(message.get("content"), where)}]
    raise ProtocolError(f"{where}.role must be user, assistant or system", f"{where}.role")


def _unsupported(block: dict[str, Any], path: str) -> ProtocolError:
    kind = block["type"]
    what = f"{kind}s are" if kind in ("image", "document") else f"a {kind} block is"
    return ProtocolError(f"{path}: {what} not supported by the recording proxy", path)


def _user_messages(blocks: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Tool results become tool messages where they occur; the text between them, one user
    message per run of text blocks."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for path, block in blocks:
        if block["type"] == "text":
            texts.append(_text_block(block, path))
        elif block["type"] == "tool_result":
            if texts:
                out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
                texts = []
            out.append(_tool_message(block, path))
        else:
            raise _unsupported(block, path)
    if texts or not out:
        out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
    return out


def _tool_message(block: dict[str, Any], path: str) -> dict[str, Any]:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise ProtocolError(f"{path}.tool_use_id must be a string", f"{path}.tool_use_id")
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            part_path = f"{path}.content[{k}]"
            if isinstance(part, dict) and part.get("type") not in (None, "text"):
                raise _unsupported(part, part_path)
            parts.append(_text_block(part, part_path))
        text = BLOCK_SEPARATOR.join(parts)
    else:
        raise ProtocolError(
            f"{path}.content must be a string or a list of text blocks", f"{path}.content"
        )
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text}


def _assistant_message(blocks: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for path, block in blocks:
        kind = block["type"]
        if kind == "text":
            texts.append(_text_block(block, path))
        elif kind == "tool_use":
            calls.append(_tool_call(block, path))
        elif kind in ("thinking", "redacted_thinking"):
            # Dropped: SmolLM2's chat template renders no reasoning, so the prompt vLLM
            # tokenizes has none either way. The token record stays faithful because
            # reconstruction compares the token ids of consecutive calls, not this text.
            continue
        else:
            raise _unsupported(block, path)
    message: dict[str, Any] = {"role": "assistant", "content": BLOCK_SEPARATOR.join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(block: dict[str, Any], path: str) -> dict[str, Any]:
    for key in ("id", "name"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise ProtocolError(f"{path}.{key} must be a non-empty string", f"{path}.{key}")
    tool_input = block.get("input", {})
    if not isinstance(tool_input, dict):
        raise ProtocolError(f"{path}.input must be an object", f"{path}.input")
    # json, not orjson: the spacing vLLM's hermes parser gives the arguments it returns,
    # so a call sent back reads as the model's own did.
    arguments = json.dumps(tool_input, ensure_ascii=False)
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }


def _tools(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = [] if body.get("tools") is None else body["tools"]
    if not isinstance(tools, list):
        raise ProtocolError("tools must be a list", "tools")
    functions = [f for i, t in enumerate(tools) if (f := _function_tool(t, f"tools[{i}]"))]
    if functions:
        chat["tools"] = functions
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise ProtocolError("tool_choice must be of type auto, any, tool or none", "tool_choice")
    names = {f["function"]["name"] for f in functions}
    chat_choice = _chat_tool_choice(choice, names)
    if functions:
        chat["tool_choice"] = chat_choice
        if choice.get("disable_parallel_tool_use") is True:
            chat["parallel_tool_calls"] = False


def _function_tool(tool: Any, where: str) -> dict[str, Any] | None:
    """A chat function tool, or None for a server tool (web_search_*, bash_*,
    text_editor_*, ...): those run at Anthropic, and vLLM has nothing to run them with."""
    if not isinstance(tool, dict):
        raise ProtocolError(f"{where} must be an object", where)
    if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
        return None
    name, schema = tool.get("name"), tool["input_schema"]
    if not isinstance(name, str) or not name:
        raise ProtocolError(f"{where}.name must be a non-empty string", f"{where}.name")
    if not isinstance(schema, dict):
        raise ProtocolError(f"{where}.input_schema must be an object", f"{where}.input_schema")
    function: dict[str, Any] = {"name": name, "parameters": schema}
    if "description" in tool:
        if not isinstance(tool["description"], str):
            raise ProtocolError(f"{where}.description must be a string", f"{where}.description")
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: dict[str, Any], names: set[str]) -> Any:
    kind = choice["type"]
    if kind in ("none", "auto"):
        return kind
    if not names:
        raise ProtocolError(f"tool_choice {kind} needs a tool besides server tools", "tool_choice")
    if kind == "any":
        return "required"
    name = choice.get("name")
    if name not in names:
        raise ProtocolError(f"tool_choice.name {name!r} is not among the tools", "tool_choice.name")
    return {"type": "function", "function": {"name": name}}


# --- whole response ------------------------------------------------------------------------


def messages_response_from_chat(chat: Mapping[str, Any], *, model: str) -> dict[str, Any]:
    """A whole chat.completion (as vLLM answers it, possibly still carrying prompt_token_ids /
    choices[0].token_ids / logprobs) -> an Anthropic `message` object. Never leaks token ids
    or logprobs."""
    choice = _first_choice(chat)
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
        usage.get("prompt_tokens") or _count(chat.get("prompt_token_ids")),
        usage.get("completion_tokens") or _count(choice.get("token_ids")),
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


def _count(ids: Any) -> int:
    return len(ids) if isinstance(ids, list) else 0


def _first_choice(chat: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = chat.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


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
            return self.error(_error_message(chunk) or "the model server failed midway")
        out: list[bytes] = []
        if not self.started:
            out.append(self._start(chunk))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            self._feed_delta(choice.get("delta") or {}, out)
            self.output_tokens += _count(choice.get("token_ids"))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self.matched = choice.get("stop_reason")
        return b"".join(out)

    def _start(self, chunk: Mapping[str, Any]) -> bytes:
        # With return_token_ids, vLLM's first chunk carries the prompt's ids.
        self.started = True
        self.msg_id = _message_id(chunk.get("id"))
        usage = chunk.get("usage") or {}
        self.input_tokens = _count(chunk.get("prompt_token_ids")) or usage.get("prompt_tokens") or 0
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
        return _event("error", error=anthropic_error(500, message)["error"])


# --- errors --------------------------------------------------------------------------------


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error body for an HTTP status: unlisted 4xx are invalid requests,
    unlisted 5xx (502, 504) api errors."""
    kind = _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error_from_upstream(status: int, content: bytes) -> dict[str, Any]:
    """An upstream (vLLM, OpenAI-shaped {"error": {"message": ...}} or anything else) error
    body re-said in Anthropic's shape, keeping the upstream's message."""
    return anthropic_error(status, _upstream_message(status, content))


def _upstream_message(status: int, content: bytes) -> str:
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        body = None
    if message := _error_message(body):
        return message
    text = content.decode(errors="replace").strip()
    return text[:2000] if text else f"the model server answered HTTP {status}"


def _error_message(body: Any) -> str:
    """The message of {"error": {"message": ...}}, of vLLM's older {"object": "error",
    "message": ...}, or of {"error": "..."}; "" when there is none."""
    while isinstance(body, Mapping):
        if isinstance(body.get("message"), str):
            return str(body["message"])
        body = body.get("error")
    return body if isinstance(body, str) else ""
