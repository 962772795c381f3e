"""Anthropic Messages requests translated to chat completions requests: pure, no HTTP.

Claude Code speaks `POST /v1/messages`. The recording proxy does not forward that: it
turns the request into a chat completions request (`chat_request_from_messages`), sends
it to vLLM as every call goes (token ids and logprobs captured, harness_app/wire/chat.py),
and turns the chat answer back into a Messages answer (answer.py).

Choices where the two APIs differ (docs/proxy.md says the same for readers):
- Lists of text blocks (system, user, assistant, tool results) become one string, joined
  with BLOCK_SEPARATOR; the text itself is kept exact.
- Thinking blocks in the history are dropped, tool results lose `is_error` (chat has no
  field for it; Claude Code's error text says so itself), server tools are dropped.
"""

from __future__ import annotations

import json
from typing import Any

from harness_app.wire.errors import ProtocolError

# Joins the text blocks of one system prompt, message or tool result.
BLOCK_SEPARATOR = "\n\n"

# Keys of a Messages request that have no chat counterpart and are ignored on purpose:
# thinking (SmolLM2 does not reason), metadata, context_management, betas, service_tier,
# container, mcp_servers; cache_control on any block (vLLM caches prefixes by itself).
_SAMPLING = {"temperature": (int, float), "top_p": (int, float), "top_k": (int,)}


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
