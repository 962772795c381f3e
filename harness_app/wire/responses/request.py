"""OpenAI Responses requests translated to chat completions requests: pure, no HTTP.

Codex CLI speaks only `POST /v1/responses`. The recording proxy does not forward that: it
turns the request into a chat completions request (`chat_request_from_responses`), sends
it to vLLM as every call goes (token ids and logprobs captured, harness_app/wire/chat.py),
and turns the chat answer back into a Responses answer (answer.py).

Choices where the two APIs differ (docs/proxy.md says the same for readers):
- Nothing is stored server-side: `previous_response_id`, `conversation`, `background` and
  item_reference items are refused; clients send the whole input with store=false (as
  Codex does).
- `developer` messages become `system` messages: the student's chat template knows system.
- Text parts of one message are joined with PART_SEPARATOR, as vLLM joins text parts itself.
- Reasoning items in the input are dropped: the student's chat template renders no
  reasoning, and reconstruction compares token ids, so the record stays faithful.
- A custom (freeform) tool, such as Codex's apply_patch, becomes a function tool taking one
  string `input`; its grammar `format` is dropped (chat has no grammar tools). Built-in
  tools (web_search, file_search, local_shell, ...) are dropped: vLLM has nothing to run
  them with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from harness_app.wire.errors import ProtocolError

# Joins the text parts of one message or tool output (vLLM joins text parts with "\n").
PART_SEPARATOR = "\n"

# The parameters a custom (freeform) tool gets as a chat function tool.
CUSTOM_TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = ("input_text", "output_text", "refusal", "text")
_UNSUPPORTED_PARTS = ("input_image", "input_file", "input_audio")
_SAMPLING = ("temperature", "top_p")
# Keys that ask the server to keep or run things between calls, which the proxy cannot.
_SERVER_STATE = ("conversation", "background")
# Keys of a Responses request ignored on purpose: reasoning (the student does not reason on
# request), include, store, text, prompt_cache_key, metadata, service_tier, truncation, user.


# --- request ---------------------------------------------------------------------------


def chat_request_from_responses(body: Any) -> dict[str, Any]:
    """Responses request -> OpenAI chat completions request (what vLLM gets, before the
    proxy adds return_token_ids/logprobs).

    Raises ProtocolError naming the offending field for a request it cannot translate.
    """
    if not isinstance(body, dict):
        raise ProtocolError("the request body must be a JSON object")
    for key in _SERVER_STATE:
        if body.get(key) not in (None, False):
            raise ProtocolError(
                f"{key} is not supported: the recording proxy keeps no state between calls; "
                "send the whole input with store=false",
                key,
            )
    if body.get("previous_response_id") is not None:
        raise ProtocolError(
            "previous_response_id is not supported: the recording proxy stores no responses; "
            "send the whole input with store=false",
            "previous_response_id",
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError("model must be a non-empty string", "model")
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ProtocolError("instructions must be a string", "instructions")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    _input_messages(body.get("input"), messages)
    if not messages:
        raise ProtocolError("input must not be empty", "input")
    chat: dict[str, Any] = {"model": model, "messages": messages}
    _tools(body, chat)
    _sampling(body, chat)
    return chat


def _input_messages(items: Any, messages: list[dict[str, Any]]) -> None:
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return
    if not isinstance(items, list):
        raise ProtocolError("input must be a string or a list of items", "input")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ProtocolError(f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind in ("function_call", "custom_tool_call"):
            _append_tool_call(messages, _tool_call(item, where))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = _string(item, "call_id", where)
            content = _text_of(item.get("output"), f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif kind == "reasoning":
            # Dropped: the student's chat template renders no reasoning, and reconstruction
            # compares token ids, so the record stays faithful to what the model saw.
            continue
        else:
            raise ProtocolError(f"{where}.type {kind!r} is not supported", f"{where}.type")


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise ProtocolError(
            f"{where}.role must be user, assistant, system or developer", f"{where}.role"
        )
    return {"role": _ROLES[role], "content": _text_of(item.get("content"), f"{where}.content")}


def _text_of(content: Any, where: str) -> str:
    """A string, or a list of text parts joined with PART_SEPARATOR."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ProtocolError(f"{where} must be a string or a list of parts", where)
    texts = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _UNSUPPORTED_PARTS:
            raise ProtocolError(f"{at} is an {kind} part; the proxy forwards text only", at)
        if kind not in _TEXT_PARTS:
            raise ProtocolError(f"{at} must be an input_text, output_text or refusal part", at)
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise ProtocolError(f"{at} has no text", at)
        texts.append(text)
    return PART_SEPARATOR.join(texts)


def _string(item: Mapping[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{where}.{key} must be a non-empty string", f"{where}.{key}")
    return value


def _tool_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name = _string(item, "call_id", where), _string(item, "name", where)
    if item["type"] == "custom_tool_call":
        text = item.get("input")
        if not isinstance(text, str):
            raise ProtocolError(f"{where}.input must be a string", f"{where}.input")
        arguments = orjson.dumps({"input": text}).decode()
    else:
        given = item.get("arguments")
        if not isinstance(given, str):
            raise ProtocolError(f"{where}.arguments must be a string", f"{where}.arguments")
        arguments = given
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _append_tool_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    """Consecutive calls, and the assistant message just before them, make one assistant
    message, as a chat history has it."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _tools(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise ProtocolError("tools must be a list", "tools")
    functions = [f for i, t in enumerate(tools) if (f := _function_tool(t, f"tools[{i}]"))]
    if functions:
        chat["tools"] = functions
    choice = body.get("tool_choice")
    if choice is not None:
        names = {f["function"]["name"] for f in functions}
        chat_choice = _chat_tool_choice(choice, names)
        if functions:
            chat["tool_choice"] = chat_choice
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise ProtocolError("parallel_tool_calls must be true or false", "parallel_tool_calls")
        if functions:
            chat["parallel_tool_calls"] = parallel


def _function_tool(tool: Any, where: str) -> dict[str, Any] | None:
    """A chat function tool, or None for a built-in tool (web_search, file_search,
    local_shell, computer_use, image_generation, ...): those run at OpenAI."""
    if not isinstance(tool, dict):
        raise ProtocolError(f"{where} must be an object", where)
    kind = tool.get("type")
    if kind not in ("function", "custom"):
        return None
    function: dict[str, Any] = {"name": _string(tool, "name", where)}
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise ProtocolError(f"{where}.description must be a string", f"{where}.description")
        function["description"] = description
    if kind == "custom":
        function["parameters"] = CUSTOM_TOOL_PARAMETERS
        return {"type": "function", "function": function}
    parameters = tool.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise ProtocolError(f"{where}.parameters must be an object", f"{where}.parameters")
    function["parameters"] = parameters
    if tool.get("strict") is not None:
        if not isinstance(tool["strict"], bool):
            raise ProtocolError(f"{where}.strict must be true or false", f"{where}.strict")
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Any, names: set[str]) -> Any:
    if choice in ("auto", "none"):
        return choice
    if choice == "required":
        if not names:
            raise ProtocolError(
                "tool_choice required needs a function or custom tool", "tool_choice"
            )
        return choice
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        name = choice.get("name")
        if name not in names:
            raise ProtocolError(
                f"tool_choice.name {name!r} is not among the tools", "tool_choice.name"
            )
        return {"type": "function", "function": {"name": name}}
    raise ProtocolError(
        'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
        "tool_choice",
    )


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    for key in _SAMPLING:
        value = body.get(key)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ProtocolError(f"{key} must be a number", key)
            chat[key] = value
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ProtocolError("max_output_tokens must be a positive integer", "max_output_tokens")
        chat["max_tokens"] = limit
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ProtocolError("stream must be true or false", "stream")
    chat["stream"] = stream
    if stream:
        # The usage chunk gives response.completed its token counts.
        chat["stream_options"] = {"include_usage": True}
