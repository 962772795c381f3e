"""The Anthropic Messages API translated to and from chat completions: no database."""

from __future__ import annotations

import json

import pytest

from harness_app.wire.errors import ProtocolError
from harness_app.wire.messages.answer import MessagesStream, messages_response_from_chat
from harness_app.wire.messages.request import chat_request_from_messages

READ_SCHEMA = {
    "type": "object",
    "properties": {"file_path": {"type": "string"}},
    "required": ["file_path"],
}


def claude_code_request() -> dict:
    """What Claude Code 2.1 sends on its second turn, cut down to one of each kind."""
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "temperature": 1,
        "metadata": {"user_id": "user_abc"},
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "context_management": {"edits": []},
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {
                "type": "text",
                "text": "Use the tools.\nBe brief.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "tools": [
            {"name": "Read", "description": "Reads a file.", "input_schema": READ_SCHEMA},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"type": "bash_20250124", "name": "bash"},
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>cwd: /repo</system-reminder>"},
                    {
                        "type": "text",
                        "text": "What is in notes.txt?",
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should read it.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Reading it."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "Read",
                        "input": {"file_path": "/repo/notes.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": [{"type": "text", "text": "1\tbuy milk"}],
                    },
                    {"type": "text", "text": "Answer in French."},
                ],
            },
        ],
    }


def test_a_claude_code_request_becomes_the_chat_request_vllm_gets():
    assert chat_request_from_messages(claude_code_request()) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "temperature": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {
                "role": "system",
                "content": "You are Claude Code, Anthropic's official CLI for Claude."
                "\n\nUse the tools.\nBe brief.",
            },
            {
                "role": "user",
                "content": "<system-reminder>cwd: /repo</system-reminder>\n\nWhat is in notes.txt?",
            },
            {
                "role": "assistant",
                "content": "Reading it.",
                "tool_calls": [
                    {
                        "id": "toolu_01",
                        "type": "function",
                        "function": {
                            "name": "Read",
                            "arguments": '{"file_path": "/repo/notes.txt"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_01", "content": "1\tbuy milk"},
            {"role": "user", "content": "Answer in French."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Read",
                    "description": "Reads a file.",
                    "parameters": READ_SCHEMA,
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
    }


def test_plain_strings_sampling_and_tool_choices_translate():
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": "Be terse.",
        "top_p": 0.9,
        "top_k": 20,
        "stop_sequences": ["</answer>"],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "The answer is"},
        ],
        "tools": [{"name": "Read", "input_schema": READ_SCHEMA, "type": "custom"}],
        "tool_choice": {"type": "tool", "name": "Read"},
    }
    chat = chat_request_from_messages(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "again"},  # consecutive turns stay apart
        {"role": "assistant", "content": "The answer is"},
    ]
    assert (chat["top_p"], chat["top_k"], chat["stop"]) == (0.9, 20, ["</answer>"])
    assert chat["stream"] is False and "stream_options" not in chat
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "Read"}}
    # A trailing assistant message is a prefill: vLLM continues it.
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False
    for kind, expected in (("any", "required"), ("none", "none")):
        body["tool_choice"] = {"type": kind}
        assert chat_request_from_messages(body)["tool_choice"] == expected


def test_a_tool_result_given_as_a_string_with_is_error_keeps_its_text():
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": "boom",
                        "is_error": True,
                    },
                    {"type": "tool_result", "tool_use_id": "b"},
                ],
            }
        ],
    }
    assert chat_request_from_messages(body)["messages"] == [
        {"role": "tool", "tool_call_id": "a", "content": "boom"},
        {"role": "tool", "tool_call_id": "b", "content": ""},
    ]


def _with_message(content, role="user"):
    return {"model": "m", "max_tokens": 5, "messages": [{"role": role, "content": content}]}


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": True, "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
        ({**_with_message("x"), "system": 3}, "system"),
        ({**_with_message("x"), "system": [{"type": "image"}]}, "system[0]"),
        ({**_with_message("x"), "temperature": "hot"}, "temperature"),
        ({**_with_message("x"), "top_k": 2.5}, "top_k"),
        ({**_with_message("x"), "stop_sequences": "STOP"}, "stop_sequences"),
        ({**_with_message("x"), "stream": "yes"}, "stream"),
        (_with_message("x", role="tool"), "messages[0].role"),
        (_with_message(7, role="system"), "messages[0]"),
        (_with_message(None), "messages[0].content"),
        (_with_message(["x"]), "messages[0].content[0]"),
        (_with_message([{"type": "text", "text": 1}]), "messages[0].content[0].text"),
        (_with_message([IMAGE]), "messages[0].content[0]"),
        (_with_message([{"type": "document"}]), "messages[0].content[0]"),
        (_with_message([{"type": "tool_result"}]), "messages[0].content[0].tool_use_id"),
        (
            _with_message([{"type": "tool_result", "tool_use_id": "a", "content": [IMAGE]}]),
            "messages[0].content[0].content[0]",
        ),
        (
            _with_message([{"type": "tool_result", "tool_use_id": "a", "content": 7}]),
            "messages[0].content[0].content",
        ),
        (
            _with_message([{"type": "tool_use", "id": "a", "input": {}}], role="assistant"),
            "messages[0].content[0].name",
        ),
        (
            _with_message(
                [{"type": "tool_use", "id": "a", "name": "R", "input": "{}"}], role="assistant"
            ),
            "messages[0].content[0].input",
        ),
        (
            _with_message([{"type": "server_tool_use"}], role="assistant"),
            "messages[0].content[0]",
        ),
        ({**_with_message("x"), "tools": {}}, "tools"),
        ({**_with_message("x"), "tools": [{"name": "", "input_schema": {}}]}, "tools[0].name"),
        (
            {**_with_message("x"), "tools": [{"name": "R", "input_schema": []}]},
            "tools[0].input_schema",
        ),
        (
            {**_with_message("x"), "tools": [{"name": "R", "input_schema": {}, "description": 1}]},
            "tools[0].description",
        ),
        ({**_with_message("x"), "tool_choice": "auto"}, "tool_choice"),
        ({**_with_message("x"), "tool_choice": {"type": "any"}}, "tool_choice"),
        (
            {
                **_with_message("x"),
                "tools": [{"name": "R", "input_schema": {}}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            },
            "tool_choice.name",
        ),
    ],
)
def test_requests_that_cannot_be_translated_are_refused_by_field(body, param):
    with pytest.raises(ProtocolError) as caught:
        chat_request_from_messages(body)
    assert caught.value.param == param
    if param:
        assert param in str(caught.value) or param.split(".")[0] in str(caught.value)


def test_an_image_is_refused_with_a_reason():
    with pytest.raises(ProtocolError, match="images are not supported by the recording proxy"):
        chat_request_from_messages(_with_message([IMAGE]))


def chat_completion(message, finish="stop", stop_reason=None):
    """A whole answer as vLLM gives it to the proxy, token capture included."""
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": "smollm2",
        "prompt_token_ids": [1, 2, 3, 4],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "logprobs": {"content": [{"token": "x", "logprob": -0.5}]},
                "finish_reason": finish,
                "stop_reason": stop_reason,
                "token_ids": [7, 8],
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    }


def test_a_whole_text_answer_becomes_a_message_without_token_ids():
    answer = messages_response_from_chat(
        chat_completion({"content": "Bonjour.", "tool_calls": []}), model="claude-sonnet-4-5"
    )
    assert answer == {
        "id": "msg_abc123",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Bonjour."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 4,
            "output_tokens": 2,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    text = json.dumps(answer)
    assert "token_ids" not in text and "logprob" not in text


def test_a_whole_tool_call_answer_with_reasoning_keeps_the_order_of_blocks():
    call = {
        "id": "chatcmpl-tool-9",
        "type": "function",
        "function": {"name": "Read", "arguments": '{"file_path": "/a"}'},
    }
    bad = {"id": "t2", "type": "function", "function": {"name": "Read", "arguments": "[1,"}}
    chat = chat_completion(
        {"content": "Let me look.", "reasoning_content": "hmm", "tool_calls": [call, bad]},
        finish="tool_calls",
    )
    del chat["usage"]  # the counts then come from the token ids
    answer = messages_response_from_chat(chat, model="m")
    assert answer["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": ""},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "chatcmpl-tool-9", "name": "Read", "input": {"file_path": "/a"}},
        {"type": "tool_use", "id": "t2", "name": "Read", "input": {}},  # not JSON: no input
    ]
    assert answer["stop_reason"] == "tool_use"
    assert (answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]) == (4, 2)


@pytest.mark.parametrize(
    ("finish", "matched", "reason", "sequence"),
    [
        ("length", None, "max_tokens", None),
        ("stop", "</answer>", "stop_sequence", "</answer>"),
        ("stop", 2, "end_turn", None),  # a stop token id is the end of the turn
    ],
)
def test_the_finish_maps_to_the_stop_reason(finish, matched, reason, sequence):
    chat = chat_completion({"content": "x"}, finish=finish, stop_reason=matched)
    answer = messages_response_from_chat(chat, model="m")
    assert (answer["stop_reason"], answer["stop_sequence"]) == (reason, sequence)


def parse_sse(data: bytes) -> list[tuple[str, dict]]:
    assert data.endswith(b"\n\n")
    events = []
    for raw in data.decode().split("\n\n")[:-1]:
        name_line, data_line = raw.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        payload = json.loads(data_line[6:])
        assert payload["type"] == name_line[7:]
        events.append((name_line[7:], payload))
    return events


def chunk(delta=None, finish=None, stop_reason=None, token_ids=(5,), **top):
    """One vLLM chat.completion.chunk with the token capture the proxy asks for."""
    choice = {
        "index": 0,
        "delta": delta or {},
        "logprobs": {"content": [{"logprob": -0.1}]},
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "token_ids": list(token_ids),
    }
    return {"id": "chatcmpl-s1", "object": "chat.completion.chunk", "choices": [choice], **top}


USAGE_CHUNK = {
    "id": "chatcmpl-s1",
    "choices": [],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
}


def run_stream(chunks, model="m") -> tuple[bytes, list[bytes]]:
    stream = MessagesStream(model=model)
    pieces = [stream.feed(c) for c in chunks]
    pieces.append(stream.finish())
    return b"".join(pieces), pieces


def test_a_streamed_text_answer_gives_anthropics_event_sequence():
    chunks = [
        chunk({"role": "assistant", "content": ""}, token_ids=(), prompt_token_ids=[1, 2, 3]),
        chunk({"content": "Bon"}),
        chunk({"content": "jour"}),
        chunk({"content": "."}, finish="stop", token_ids=(6, 7)),
        USAGE_CHUNK,
    ]
    data, pieces = run_stream(chunks)
    events = parse_sse(data)
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["id"] == "msg_s1" and start["content"] == [] and start["model"] == "m"
    assert start["usage"]["input_tokens"] == 3
    assert events[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert events[7][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {
            "input_tokens": 3,
            "output_tokens": 4,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    assert b"token_ids" not in data and b"logprob" not in data
    assert pieces[-2] == b""  # the usage chunk sends nothing by itself
    text = "".join(p["delta"]["text"] for n, p in events if n == "content_block_delta")
    whole = messages_response_from_chat(chat_completion({"content": "Bonjour."}), model="m")
    assert [{"type": "text", "text": text}] == whole["content"]


def tool_chunks(arguments_pieces, call_id="chatcmpl-tool-1", index=0):
    first = {"index": index, "id": call_id, "type": "function"}
    first["function"] = {"name": "Read", "arguments": ""}
    rest = [{"index": index, "function": {"arguments": p}} for p in arguments_pieces]
    return [chunk({"tool_calls": [first]})] + [chunk({"tool_calls": [r]}) for r in rest]


def test_a_streamed_tool_call_after_reasoning_and_text_gives_one_block_each():
    chunks = [
        chunk({"role": "assistant", "content": ""}, token_ids=(), prompt_token_ids=[1, 2, 3]),
        chunk({"reasoning_content": "look"}),
        chunk({"content": "Reading."}),
        *tool_chunks(['{"file_', 'path": "/a"}']),
        *tool_chunks(["not json"], call_id="chatcmpl-tool-2", index=1),
        chunk({}, finish="tool_calls"),
        USAGE_CHUNK,
    ]
    events = parse_sse(run_stream(chunks)[0])
    shapes = [
        (name, payload.get("index"), (payload.get("content_block") or payload.get("delta") or {}))
        for name, payload in events[2:-2]
    ]
    assert shapes == [
        ("content_block_start", 0, {"type": "thinking", "thinking": "", "signature": ""}),
        ("content_block_delta", 0, {"type": "thinking_delta", "thinking": "look"}),
        ("content_block_stop", 0, {}),
        ("content_block_start", 1, {"type": "text", "text": ""}),
        ("content_block_delta", 1, {"type": "text_delta", "text": "Reading."}),
        ("content_block_stop", 1, {}),
        (
            "content_block_start",
            2,
            {"type": "tool_use", "id": "chatcmpl-tool-1", "name": "Read", "input": {}},
        ),
        (
            "content_block_delta",
            2,
            {"type": "input_json_delta", "partial_json": '{"file_path": "/a"}'},
        ),
        ("content_block_stop", 2, {}),
        (
            "content_block_start",
            3,
            {"type": "tool_use", "id": "chatcmpl-tool-2", "name": "Read", "input": {}},
        ),
        ("content_block_delta", 3, {"type": "input_json_delta", "partial_json": "{}"}),
        ("content_block_stop", 3, {}),
    ]
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    whole = messages_response_from_chat(
        chat_completion(
            {
                "reasoning_content": "look",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-1",
                        "function": {"name": "Read", "arguments": '{"file_path": "/a"}'},
                    },
                    {
                        "id": "chatcmpl-tool-2",
                        "function": {"name": "Read", "arguments": "not json"},
                    },
                ],
            },
            finish="tool_calls",
        ),
        model="m",
    )
    assert streamed_content(events) == whole["content"]


def streamed_content(events) -> list[dict]:
    """The content a client accumulates from the events, as the SDKs do."""
    blocks: list[dict] = []
    partial: dict[int, str] = {}
    for name, payload in events:
        if name == "content_block_start":
            blocks.append(dict(payload["content_block"]))
        elif name == "content_block_delta":
            block, delta = blocks[payload["index"]], payload["delta"]
            if delta["type"] == "input_json_delta":
                partial[payload["index"]] = (
                    partial.get(payload["index"], "") + delta["partial_json"]
                )
            else:
                key = "text" if delta["type"] == "text_delta" else "thinking"
                block[key] += delta[key]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return blocks


def test_a_stream_stopped_by_a_stop_sequence_or_length_says_so():
    events = parse_sse(run_stream([chunk({"content": "a"}, finish="stop", stop_reason="##")])[0])
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "##"}
    # Without a usage chunk, the counts come from the token ids that came.
    assert events[-2][1]["usage"]["output_tokens"] == 1
    events = parse_sse(run_stream([chunk({"content": "a"}, finish="length")])[0])
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"


def test_an_empty_stream_still_opens_and_closes_the_message():
    events = parse_sse(run_stream([])[0])
    assert [n for n, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]


def test_a_broken_stream_ends_with_an_error_event():
    stream = MessagesStream(model="m")
    stream.feed(chunk({"content": "a"}))
    assert parse_sse(stream.error("the model server went away")) == [
        (
            "error",
            {
                "type": "error",
                "error": {"type": "api_error", "message": "the model server went away"},
            },
        )
    ]
    assert stream.feed(chunk({"content": "b"})) == b"" and stream.finish() == b""


def test_an_error_chunk_from_vllm_midway_ends_the_stream_with_an_error_event():
    stream = MessagesStream(model="m")
    stream.feed(chunk({"content": "a"}))
    failed = {"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}
    assert parse_sse(stream.feed(failed))[0][1]["error"]["message"] == "engine died"
    assert stream.finish() == b""


def test_a_system_message_between_turns_stays_a_system_message():
    # Claude Code 2.1 puts its environment notes in a system message after the user's turn.
    body = {
        **_with_message("list the files"),
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list the files"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
        ],
    }
    chat = chat_request_from_messages(body)
    assert chat["messages"][-2:] == [
        {"role": "user", "content": "list the files"},
        {"role": "system", "content": "# Environment"},
    ]
