"""The OpenAI Responses API translated to and from chat completions: no database."""

from __future__ import annotations

import json
import typing

import pytest

from harness_app.wire.errors import ProtocolError
from harness_app.wire.responses.answer import (
    ResponsesStream,
    custom_tool_input,
    responses_response_from_chat,
)
from harness_app.wire.responses.request import (
    CUSTOM_TOOL_PARAMETERS,
    chat_request_from_responses,
)

SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    "required": ["command"],
}
SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command.",
    "strict": False,
    "parameters": SHELL_SCHEMA,
}
PATCH_TOOL = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edits files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"},
}
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"
PATCH_ARGUMENTS = json.dumps({"input": PATCH}, separators=(",", ":"))


def codex_request() -> dict:
    """What Codex CLI sends on a later turn, cut down to one of each kind."""
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [
                    {
                        "type": "input_text",
                        "text": "<environment_context>/repo</environment_context>",
                    },
                    {"type": "input_text", "text": "Add a.txt and list the files."},
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Adding the file."}],
            },
            {
                "type": "custom_tool_call",
                "call_id": "call_p",
                "name": "apply_patch",
                "input": PATCH,
            },
            {
                "type": "function_call",
                "call_id": "call_s",
                "name": "shell",
                "arguments": '{"command":["ls"]}',
            },
            {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
            {
                "type": "function_call_output",
                "call_id": "call_s",
                "output": [{"type": "input_text", "text": "a.txt"}],
            },
            {"role": "user", "content": "Thanks."},
        ],
        "tools": [SHELL_TOOL, PATCH_TOOL, {"type": "web_search"}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "conv-1",
        "text": {"verbosity": "medium"},
    }


def test_a_codex_request_becomes_the_chat_request_it_means() -> None:
    chat = chat_request_from_responses(codex_request())
    assert chat == {
        "model": "gpt-5-codex",
        "messages": [
            {"role": "system", "content": "You are Codex, a coding agent."},
            {"role": "system", "content": "<permissions>sandboxed</permissions>"},
            {
                "role": "user",
                "content": "<environment_context>/repo</environment_context>\n"
                "Add a.txt and list the files.",
            },
            {
                "role": "assistant",
                "content": "Adding the file.",
                "tool_calls": [
                    {
                        "id": "call_p",
                        "type": "function",
                        "function": {"name": "apply_patch", "arguments": PATCH_ARGUMENTS},
                    },
                    {
                        "id": "call_s",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"command":["ls"]}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_p", "content": "Done!"},
            {"role": "tool", "tool_call_id": "call_s", "content": "a.txt"},
            {"role": "user", "content": "Thanks."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "shell",
                    "description": "Runs a shell command.",
                    "parameters": SHELL_SCHEMA,
                    "strict": False,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "apply_patch",
                    "description": "Edits files with a patch.",
                    "parameters": CUSTOM_TOOL_PARAMETERS,
                },
            },
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_a_string_input_and_sampling_settings() -> None:
    body = {"model": "m", "input": "Hi", "max_output_tokens": 64, "temperature": 0.7, "top_p": 0.9}
    assert chat_request_from_responses(body) == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 64,
        "temperature": 0.7,
        "top_p": 0.9,
        "stream": False,
    }


def test_a_function_call_without_an_assistant_message_gets_one_of_its_own() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "List."},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        ],
    }
    assert chat_request_from_responses(body)["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        ],
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("required", "required"),
        ("none", "none"),
        (
            {"type": "function", "name": "shell"},
            {"type": "function", "function": {"name": "shell"}},
        ),
        (
            {"type": "custom", "name": "apply_patch"},
            {"type": "function", "function": {"name": "apply_patch"}},
        ),
    ],
)
def test_tool_choice_becomes_its_chat_equivalent(choice: object, expected: object) -> None:
    body = {"model": "m", "input": "x", "tools": [SHELL_TOOL, PATCH_TOOL], "tool_choice": choice}
    assert chat_request_from_responses(body)["tool_choice"] == expected


def test_built_in_tools_alone_send_no_tools() -> None:
    body = {"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": "auto"}
    assert "tools" not in chat_request_from_responses(body)
    assert "tool_choice" not in chat_request_from_responses(body)


def _with_input(*items: object) -> dict:
    return {"model": "m", "input": list(items)}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "x"}, "model"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation"),
        ({"model": "m", "input": "x", "background": True}, "background"),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": "x", "instructions": ["a"]}, "instructions"),
        (_with_input("hi"), "input[0]"),
        (_with_input({"role": "tool", "content": "x"}), "input[0].role"),
        (_with_input({"role": "user", "content": 3}), "input[0].content"),
        (
            _with_input(
                {"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "input_image", "image_url": "u"}]},
            ),
            "input[1].content[0]",
        ),
        (
            _with_input({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}),
            "input[0].content[0]",
        ),
        (_with_input({"role": "user", "content": [{"type": "input_text"}]}), "input[0].content[0]"),
        (_with_input({"type": "item_reference", "id": "msg_1"}), "input[0].type"),
        (_with_input({"type": "local_shell_call", "id": "x"}), "input[0].type"),
        (
            _with_input({"type": "function_call", "name": "f", "arguments": "{}"}),
            "input[0].call_id",
        ),
        (
            _with_input({"type": "function_call", "call_id": "c", "arguments": "{}"}),
            "input[0].name",
        ),
        (
            _with_input({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}),
            "input[0].arguments",
        ),
        (
            _with_input({"type": "custom_tool_call", "call_id": "c", "name": "f", "input": 1}),
            "input[0].input",
        ),
        (_with_input({"type": "function_call_output", "output": "x"}), "input[0].call_id"),
        (
            _with_input({"type": "function_call_output", "call_id": "c", "output": None}),
            "input[0].output",
        ),
        ({"model": "m", "input": "x", "tools": {}}, "tools"),
        ({"model": "m", "input": "x", "tools": ["shell"]}, "tools[0]"),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        (
            {"model": "m", "input": "x", "tools": [SHELL_TOOL | {"parameters": "{}"}]},
            "tools[0].parameters",
        ),
        (
            {"model": "m", "input": "x", "tools": [SHELL_TOOL | {"description": 1}]},
            "tools[0].description",
        ),
        ({"model": "m", "input": "x", "tools": [SHELL_TOOL | {"strict": "no"}]}, "tools[0].strict"),
        ({"model": "m", "input": "x", "tools": [SHELL_TOOL], "tool_choice": "any"}, "tool_choice"),
        (
            {
                "model": "m",
                "input": "x",
                "tools": [SHELL_TOOL],
                "tool_choice": {"type": "function", "name": "nope"},
            },
            "tool_choice.name",
        ),
        ({"model": "m", "input": "x", "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
        ({"model": "m", "input": "x", "top_p": True}, "top_p"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
    ],
)
def test_every_bad_request_names_its_field(body: object, param: str | None) -> None:
    with pytest.raises(ProtocolError) as caught:
        chat_request_from_responses(body)
    assert caught.value.param == param
    assert str(caught.value)
    if param:
        assert param.split("[")[0].split(".")[0] in str(caught.value)


# --- whole responses ------------------------------------------------------------------------


def chat_answer(message: dict, finish: str = "stop", usage: dict | None = None) -> dict:
    answer = {
        "id": "chatcmpl-7f3a",
        "object": "chat.completion",
        "created": 1795580000,
        "model": "student",
        "prompt_token_ids": [1, 2, 3, 4],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, **message},
                "logprobs": {"content": [{"token": "a", "logprob": -0.1}]},
                "finish_reason": finish,
                "token_ids": [7, 8],
            }
        ],
    }
    if usage is not None:
        answer["usage"] = usage
    return answer


USAGE_4_2 = {
    "input_tokens": 4,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 2,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 6,
}


def test_a_text_answer_becomes_a_completed_response_echoing_the_request() -> None:
    request = codex_request()
    response = responses_response_from_chat(
        chat_answer({"content": "Hello."}), model="gpt-5-codex", request=request
    )
    assert response == {
        "id": "resp_7f3a",
        "object": "response",
        "created_at": 1795580000,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": "You are Codex, a coding agent.",
        "max_output_tokens": None,
        "model": "gpt-5-codex",
        "output": [
            {
                "type": "message",
                "id": "msg_7f3a_0",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Hello.", "annotations": [], "logprobs": []}
                ],
            }
        ],
        "output_text": "Hello.",
        "parallel_tool_calls": False,
        "previous_response_id": None,
        "store": False,
        "temperature": None,
        "tool_choice": "auto",
        "tools": request["tools"],
        "top_p": None,
        "usage": USAGE_4_2,
    }
    assert "token_ids" not in json.dumps(response)
    assert 'logprob"' not in json.dumps(response)


def test_reasoning_and_tool_calls_become_their_items_in_order() -> None:
    message = {
        "reasoning_content": "Think.",
        "content": "Patching.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "apply_patch", "arguments": PATCH_ARGUMENTS},
            },
            {"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
        ],
    }
    usage = {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}
    response = responses_response_from_chat(
        chat_answer(message, "tool_calls", usage), model="m", request=codex_request()
    )
    assert response["output"][0] == {
        "type": "reasoning",
        "id": "rs_7f3a_0",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Think."}],
    }
    assert response["output"][1]["content"][0]["text"] == "Patching."
    assert response["output"][2:] == [
        {
            "type": "custom_tool_call",
            "id": "ctc_7f3a_2",
            "call_id": "call_a",
            "name": "apply_patch",
            "input": PATCH,
            "status": "completed",
        },
        {
            "type": "function_call",
            "id": "fc_7f3a_3",
            "call_id": "call_b",
            "name": "shell",
            "arguments": "{}",
            "status": "completed",
        },
    ]
    assert response["usage"]["input_tokens"] == 40
    assert response["usage"]["total_tokens"] == 60


def test_an_answer_cut_at_the_token_limit_is_incomplete() -> None:
    response = responses_response_from_chat(
        chat_answer({"content": "Hel"}, "length"), model="m", request={"max_output_tokens": 2}
    )
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["max_output_tokens"] == 2


def test_a_custom_tool_input_is_the_models_text_when_it_skipped_the_json() -> None:
    assert custom_tool_input(json.dumps({"input": PATCH})) == PATCH
    assert custom_tool_input(PATCH) == PATCH
    assert custom_tool_input('{"patch": "x"}') == '{"patch": "x"}'


# --- streams --------------------------------------------------------------------------------


def chunk(delta: dict | None = None, finish: str | None = None, **extra: object) -> dict:
    """A vLLM chat.completion.chunk as it streams with return_token_ids and logprobs."""
    choices = []
    if delta is not None:
        choices = [
            {
                "index": 0,
                "delta": delta,
                "logprobs": {"content": [{"token": "t", "logprob": -0.5}]},
                "finish_reason": finish,
                "token_ids": [9],
            }
        ]
    return {
        "id": "chatcmpl-7f3a",
        "object": "chat.completion.chunk",
        "created": 1795580000,
        "model": "student",
        "choices": choices,
        **extra,
    }


def usage_chunk(prompt: int, completion: int) -> dict:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return chunk(None, usage=usage | {"total_tokens": prompt + completion})


def text_chunks(finish: str = "stop") -> list[dict]:
    return [
        chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2, 3]),
        chunk({"content": "Hel"}),
        chunk({"content": 'lo, "wörld"\n'}),
        chunk({"content": ""}, finish),
        usage_chunk(3, 3),
    ]


def tool_chunks() -> list[dict]:
    """Hermes-style: each call's id and name first, then its arguments in pieces."""

    def call(index: int, **function: str) -> dict:
        part: dict = {"index": index, "function": function}
        if "name" in function:
            part |= {"id": f"call_{index}", "type": "function"}
        return {"tool_calls": [part]}

    half = len(PATCH_ARGUMENTS) // 2
    return [
        chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2, 3]),
        chunk({"reasoning_content": "Plan."}),
        chunk(call(0, name="shell", arguments="")),
        chunk(call(0, arguments='{"command": ')),
        chunk(call(0, arguments='["ls"]}')),
        chunk(call(1, name="apply_patch", arguments="")),
        chunk(call(1, arguments=PATCH_ARGUMENTS[:half])),
        chunk(call(1, arguments=PATCH_ARGUMENTS[half:]), "tool_calls"),
        usage_chunk(3, 12),
    ]


def run_stream(chunks: list[dict], request: dict | None = None) -> tuple[bytes, list[dict]]:
    stream = ResponsesStream(model="gpt-5-codex", request=request or codex_request())
    sent = b"".join(stream.feed(c) for c in chunks) + stream.finish()
    events = []
    for frame in sent.decode().split("\n\n")[:-1]:
        name_line, data_line = frame.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {data['type']}"
        events.append(data)
    assert sent.endswith(b"\n\n")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return sent, events


def test_a_streamed_text_answer_gives_the_responses_event_sequence() -> None:
    sent, events = run_stream(text_chunks())
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    assert events[4] == {
        "type": "response.output_text.delta",
        "sequence_number": 4,
        "item_id": "msg_7f3a_0",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hel",
        "logprobs": [],
    }
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == 'Hello, "wörld"\n' == events[6]["text"]
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"] == [events[8]["item"]]
    assert final["output"][0]["content"][0]["text"] == text
    assert final["usage"]["input_tokens"] == 3
    assert final["usage"]["output_tokens"] == 3
    assert b"token_ids" not in sent
    assert b"-0.5" not in sent


def test_a_streamed_answer_equals_the_whole_answer() -> None:
    _, events = run_stream(text_chunks())
    whole = responses_response_from_chat(
        chat_answer(
            {"content": 'Hello, "wörld"\n'}, usage={"prompt_tokens": 3, "completion_tokens": 3}
        ),
        model="gpt-5-codex",
        request=codex_request(),
    )
    assert events[-1]["response"] == whole


def test_streamed_reasoning_and_tool_calls_give_their_items() -> None:
    _, events = run_stream(tool_chunks())
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[6]["item"] == {
        "type": "function_call",
        "id": "fc_7f3a_1",
        "call_id": "call_0",
        "name": "shell",
        "arguments": "",
        "status": "in_progress",
    }
    arguments = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert arguments == '{"command": ["ls"]}' == events[9]["arguments"]
    assert events[12]["delta"] == PATCH == events[13]["input"]
    final = events[-1]["response"]
    assert final["output"] == [events[5]["item"], events[10]["item"], events[14]["item"]]
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": "Plan."}]
    assert final["output"][2] == {
        "type": "custom_tool_call",
        "id": "ctc_7f3a_2",
        "call_id": "call_1",
        "name": "apply_patch",
        "input": PATCH,
        "status": "completed",
    }
    assert final["usage"]["output_tokens"] == 12


def test_a_stream_cut_at_the_token_limit_ends_incomplete() -> None:
    _, events = run_stream(text_chunks("length"))
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["status"] == "incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_stream_that_breaks_midway_ends_failed() -> None:
    stream = ResponsesStream(model="m", request={"input": "x"})
    sent = stream.feed(text_chunks()[0]) + stream.feed(text_chunks()[1])
    failed = stream.feed({"error": {"message": "engine dead", "code": 500}})
    assert failed.startswith(b"event: response.failed\n")
    event = json.loads(failed.decode().split("data: ", 1)[1])
    assert event["sequence_number"] == sent.count(b"event: ")
    assert event["response"]["status"] == "failed"
    assert event["response"]["error"] == {"code": "server_error", "message": "engine dead"}
    assert stream.feed(text_chunks()[2]) == b""
    assert stream.finish() == b""


def test_a_failure_before_any_chunk_still_starts_the_response() -> None:
    sent = ResponsesStream(model="m", request={}).error("upstream refused")
    assert [line for line in sent.split(b"\n") if line.startswith(b"event:")] == [
        b"event: response.created",
        b"event: response.in_progress",
        b"event: response.failed",
    ]


@pytest.mark.parametrize("chunks", [text_chunks(), tool_chunks(), text_chunks("length")])
def test_the_openai_sdk_accepts_the_stream(chunks: list[dict]) -> None:
    """The openai SDK's own stream accumulator, which checks item identities and order."""
    streaming = pytest.importorskip("openai.lib.streaming.responses._responses")
    from openai.types.responses import ResponseStreamEvent

    union = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
    models = {typing.get_args(m.model_fields["type"].annotation)[0]: m for m in union}
    request = codex_request()
    state = streaming.ResponseStreamState(input_tools=[SHELL_TOOL], text_format=streaming.omit)
    _, events = run_stream(chunks, request)
    for data in events:
        state.handle_event(models[data["type"]].model_validate(data))
    if events[-1]["type"] == "response.completed":
        parsed = state._completed_response
        assert parsed is not None
        assert [item.type for item in parsed.output] == [
            i["type"] for i in events[-1]["response"]["output"]
        ]


def test_the_openai_sdk_accepts_whole_responses_and_failures() -> None:
    types = pytest.importorskip("openai.types.responses")
    message = {
        "reasoning_content": "Think.",
        "content": "Patching.",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "apply_patch", "arguments": "{}"}}
        ],
    }
    whole = responses_response_from_chat(
        chat_answer(message, "length"), model="m", request=codex_request()
    )
    parsed = types.Response.model_validate(whole)
    assert [item.type for item in parsed.output] == ["reasoning", "message", "custom_tool_call"]
    assert parsed.output_text == "Patching."
    failed = ResponsesStream(model="m", request=codex_request()).error("engine dead")
    data = json.loads(failed.decode().rsplit("data: ", 1)[1])
    event = types.ResponseFailedEvent.model_validate(data)
    assert event.response.error is not None
    assert event.response.error.message == "engine dead"
