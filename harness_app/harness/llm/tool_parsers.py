"""Tool calls read from a completion's raw text, in the syntax each model family writes.

On the token-in path the prompt goes to /completions as token ids, so the server's tool-call
parser never runs and the policy reads the calls out of the text itself. Each family writes
them differently:

- `hermes` (Qwen, Hermes): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
- `harmony` (gpt-oss): messages on the commentary channel addressed `to=functions.<name>`,
  JSON in the message body, after an optional analysis-channel message.
- `llama3_json` (Llama 3.1-3.3): `{"name": ..., "parameters": {...}}` objects, separated by
  `;`, optionally after `<|python_tag|>`.
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (tokenizers v3-v7), or
  `[TOOL_CALLS]name[ARGS]{...}` per call (v11 adds `[CALL_ID]id` before `[ARGS]`; v13 drops it).

Every parser returns the policy's ToolCall objects, with call ids `call_0`, `call_1`, ...
in order. It returns [] when the text holds no call, which the policy turns into a
no-tool-call format error. A call it cannot read (bad JSON, an unknown shape, a recipient
that is not a function) comes back with the raw text as string arguments and, where no name
could be read, an empty name, so the environment counts one format error for it and tells
the model what was wrong, as the hermes path always has.

Harmony, Llama 3 and Mistral mark their calls with special tokens, which vLLM leaves out of
the text unless the request sets `skip_special_tokens: false`; the policy does so for the
parsers in `NEEDS_SPECIAL_TOKENS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from harness_app.harness.types import ToolCall

_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

# A Harmony message: its header runs from the start of the text or a <|start|> to
# <|message|>; its body stops at the next end marker, or at the end of a cut-off text.
_HARMONY_MESSAGE = re.compile(
    r"(?:^|<\|start\|>)(?P<header>(?:(?!<\|start\|>).)*?)<\|message\|>"
    r"(?P<body>.*?)(?=<\|call\|>|<\|end\|>|<\|return\|>|<\|start\|>|$)",
    re.DOTALL,
)
_HARMONY_RECIPIENT = re.compile(r"\bto=(?P<recipient>[^\s<]+)")

_LLAMA_PYTHON_TAG = "<|python_tag|>"
_LLAMA_CALL_START = re.compile(r'\{\s*"name"\s*:')
_LLAMA_END_MARKERS = ("<|eom_id|>", "<|eot_id|>")

_MISTRAL_CALLS = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"
_MISTRAL_CALL_ID = "[CALL_ID]"
_MISTRAL_END = "</s>"


def json_action_call(text: str, call_id: str = "call_0") -> ToolCall:
    """One JSON action, `{"tool" or "name": ..., "arguments": {...}}`; anything else is a
    call with no name and the text as its arguments, i.e. a format error."""
    try:
        action = json.loads(text)
    except json.JSONDecodeError:
        return ToolCall(name="", arguments=text, call_id=call_id)
    if not isinstance(action, dict):
        return ToolCall(name="", arguments=text, call_id=call_id)
    name = action.get("tool", action.get("name", ""))
    arguments = action.get("arguments", {})
    if not isinstance(arguments, dict):
        arguments = json.dumps(arguments) if not isinstance(arguments, str) else arguments
    return ToolCall(name=str(name), arguments=arguments, call_id=call_id)


def parse_hermes(text: str) -> list[ToolCall]:
    # An unclosed last block (cut off by max_tokens) is still read, and fails as JSON.
    blocks = _HERMES_BLOCK.findall(text)
    return [json_action_call(b, call_id=f"call_{i}") for i, b in enumerate(blocks)]


def parse_harmony(text: str) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for message in _HARMONY_MESSAGE.finditer(text):
        found = _HARMONY_RECIPIENT.search(message["header"])
        if found is None:
            continue  # analysis or final channel: reasoning or a plain answer
        recipient = found["recipient"]
        # Anything not addressed to a function (a built-in browser tool, say) keeps its full
        # recipient as the name, which the environment rejects as an unknown tool.
        name = (
            recipient.removeprefix("functions.")
            if recipient.startswith("functions.")
            else recipient
        )
        calls.append(_named_call(name, message["body"].strip(), len(calls)))
    return calls


def parse_llama3_json(text: str) -> list[ToolCall]:
    if _LLAMA_PYTHON_TAG in text:
        payload = text.split(_LLAMA_PYTHON_TAG, 1)[1]
    else:
        start = _LLAMA_CALL_START.search(text)
        if start is None:
            return []
        payload = text[start.start() :]
    for marker in _LLAMA_END_MARKERS:
        payload = payload.split(marker, 1)[0]
    return [_object_call(obj, "parameters", i) for i, obj in enumerate(_json_objects(payload))]


def parse_mistral(text: str) -> list[ToolCall]:
    if _MISTRAL_CALLS not in text:
        return []
    calls: list[ToolCall] = []
    for segment in text.split(_MISTRAL_CALLS)[1:]:
        segment = segment.split(_MISTRAL_END, 1)[0].strip()
        if segment.startswith("["):
            calls += _mistral_list(segment, start=len(calls))
        elif _MISTRAL_ARGS in segment:
            head, arguments = segment.split(_MISTRAL_ARGS, 1)
            name = head.split(_MISTRAL_CALL_ID, 1)[0].strip()
            calls.append(_named_call(name, arguments.strip(), len(calls)))
        else:
            calls.append(ToolCall(name="", arguments=segment, call_id=f"call_{len(calls)}"))
    return calls


def _mistral_list(segment: str, start: int) -> list[ToolCall]:
    try:
        items, _ = json.JSONDecoder().raw_decode(segment)
    except json.JSONDecodeError:
        items = None
    if not isinstance(items, list) or not items:
        return [ToolCall(name="", arguments=segment, call_id=f"call_{start}")]
    return [_object_call(item, "arguments", start + i) for i, item in enumerate(items)]


def _json_objects(payload: str) -> list[Any]:
    """Successive JSON values separated by whitespace or `;`; an unreadable rest of the text
    is kept as one string, to come back as a format error."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    rest = payload.strip()
    while rest:
        try:
            value, end = decoder.raw_decode(rest)
        except json.JSONDecodeError:
            values.append(rest)
            break
        values.append(value)
        rest = rest[end:].lstrip().removeprefix(";").lstrip()
    return values


def _object_call(obj: Any, arguments_key: str, index: int) -> ToolCall:
    """A `{"name": ..., <arguments_key> or "arguments": {...}}` object as a call."""
    call_id = f"call_{index}"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raw = obj if isinstance(obj, str) else json.dumps(obj)
        return ToolCall(name="", arguments=raw, call_id=call_id)
    arguments = obj.get(arguments_key, obj.get("arguments", {}))
    return _named_call(obj["name"], arguments, index)


def _named_call(name: str, arguments: Any, index: int) -> ToolCall:
    """A call whose name was read; arguments that are not a JSON object stay a string,
    which the tool rejects as invalid arguments."""
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except json.JSONDecodeError:
            decoded = None
        arguments = decoded if isinstance(decoded, dict) else arguments
    elif not isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    return ToolCall(name=name, arguments=arguments, call_id=f"call_{index}")


TOOL_PARSERS: dict[str, Callable[[str], list[ToolCall]]] = {
    "hermes": parse_hermes,
    "harmony": parse_harmony,
    "llama3_json": parse_llama3_json,
    "mistral": parse_mistral,
}

NEEDS_SPECIAL_TOKENS = frozenset({"harmony", "llama3_json", "mistral"})


def parse_tool_calls(parser: str, text: str) -> list[ToolCall]:
    return TOOL_PARSERS[parser](text)
