"""Chat completions on the wire (token capture, stripping, stream folding, SSE) and
per-agent reconstruction: no database."""

from __future__ import annotations

import json

import pytest

from harness_app.harness.llm.reconstruct import CallTokens, reconstruct
from harness_app.wire.chat import StreamFold, agent_fingerprint, strip_added, upstream_request
from harness_app.wire.errors import ProtocolError
from harness_app.wire.record import cut_prompt_ids, ids_from_json, tokens_of
from harness_app.wire.sse import SseSplitter, sse_data, sse_events


def test_the_request_gains_token_capture_and_the_caller_is_remembered():
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}
    forwarded, asked = upstream_request(body)
    assert forwarded["return_token_ids"] is True and forwarded["logprobs"] is True
    assert forwarded["top_logprobs"] == 0  # top_logprobs without logprobs was never served
    assert not asked.token_ids and not asked.logprobs and not asked.stream
    assert "return_token_ids" not in body  # the caller's request is kept as sent


@pytest.mark.parametrize(
    ("body", "param"),
    [([], None), ({"messages": "hi"}, "messages"), ({"messages": [{}], "n": 2}, "n")],
)
def test_requests_the_proxy_cannot_record_are_refused_by_name(body, param):
    with pytest.raises(ProtocolError) as caught:
        upstream_request(body)
    assert caught.value.param == param


def test_stripping_nulls_what_was_added_and_keeps_what_was_asked():
    payload = {
        "prompt_token_ids": [1, 2],
        "choices": [{"token_ids": [3], "logprobs": {"content": [{"logprob": -1.0}]}}],
    }
    _, plain = upstream_request({"messages": [{}]})
    assert strip_added(json.loads(json.dumps(payload)), plain) == {
        "prompt_token_ids": None,
        "choices": [{"token_ids": None, "logprobs": None}],
    }
    _, both = upstream_request({"messages": [{}], "return_token_ids": True, "logprobs": True})
    assert strip_added(json.loads(json.dumps(payload)), both) == payload


def test_a_stream_folds_into_the_whole_response_with_tool_calls():
    fold = StreamFold()
    chunks = [
        {"id": "c", "model": "m", "prompt_token_ids": [1, 2], "choices": [{"delta": {}}]},
        {
            "choices": [
                {
                    "delta": {"content": "He"},
                    "token_ids": [5],
                    "logprobs": {"content": [{"logprob": -0.5}]},
                }
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "t1",
                                "function": {"name": "se", "arguments": '{"q"'},
                            }
                        ]
                    },
                    "token_ids": [6],
                    "logprobs": {"content": [{"logprob": -0.25}]},
                }
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"name": "arch", "arguments": ": 1}"}}
                        ]
                    },
                    "finish_reason": "tool_calls",
                    "token_ids": [7],
                    "logprobs": {"content": [{"logprob": 0.0}]},
                }
            ]
        },
    ]
    for chunk in chunks:
        fold.feed(chunk)
    folded = fold.response()
    message = folded["choices"][0]["message"]
    assert message["content"] == "He"
    assert message["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "search", "arguments": '{"q": 1}'}}
    ]
    found = tokens_of(folded)
    assert (found.prompt_ids.tolist(), found.completion_ids.tolist(), found.logprobs.tolist()) == (
        [1, 2],
        [5, 6, 7],
        [-0.5, -0.25, 0.0],
    )
    assert found.problem == "" and folded["choices"][0]["finish_reason"] == "tool_calls"


def test_missing_or_mismatched_token_capture_is_named():
    assert tokens_of({"choices": [{}]}).problem.startswith("token_capture_missing")
    short = {
        "prompt_token_ids": [1],
        "choices": [{"token_ids": [2, 3], "logprobs": {"content": [{"logprob": 0}]}}],
    }
    assert tokens_of(short).problem.startswith("token_count_mismatch")


def test_token_ids_that_are_not_int32_are_named_not_stored():
    for prompt in ([1, "2"], [1, 2.5], [2**40]):
        found = tokens_of({"prompt_token_ids": prompt, "choices": [{"token_ids": [3]}]})
        assert found.problem.startswith("token_capture_malformed")
        assert len(found.prompt_ids) == len(found.completion_ids) == 0


def test_sse_events_split_on_blank_lines_and_keep_the_rest():
    events, rest = sse_events(b"data: 1\n\n: comment\n\ndata: [DONE]\r\n\r\ndata: par")
    assert events == [b"data: 1", b": comment", b"data: [DONE]"]
    assert rest == b"data: par"
    assert sse_data(events[0]) == b"1" and sse_data(events[1]) is None


def test_the_fingerprint_follows_the_system_prompt_only():
    a = agent_fingerprint([{"role": "system", "content": "main"}, {"role": "user", "content": "1"}])
    b = agent_fingerprint([{"role": "system", "content": "main"}, {"role": "user", "content": "2"}])
    c = agent_fingerprint([{"role": "system", "content": "sub"}])
    assert a == b != c and len(a) == 12


def test_per_agent_merging_names_subagents_and_compaction():
    calls = [
        CallTokens(1, [1, 2], [3], [-0.1], "v", "main"),
        CallTokens(2, [9, 8], [7], [-0.2], "v", "sub"),
        CallTokens(3, [1, 2, 3, 4], [5], [-0.3], "v", "main"),
        CallTokens(4, [1, 6], [5], [-0.4], "v", "main"),  # the history was summarised
    ]
    segments, breaks = reconstruct(calls)
    assert [s.call_ids for s in segments] == [[1, 3], [4], [2]]
    assert [s.agent for s in segments] == ["main", "main", "sub"]
    assert segments[0].loss_mask == [0, 0, 1, 0, 1]
    reasons = {b.call_id: b.reason for b in breaks}
    assert reasons[1] == "first_call" and reasons[2] == "subagent_start"
    assert reasons[4].startswith("context_compaction: the prompt (2 tokens)")


def test_prompt_ids_cut_out_of_an_answer_read_back_exactly():
    answer = json.dumps(
        {
            "id": "c",
            "choices": [{"token_ids": [5], "logprobs": {"content": [{"logprob": -0.5}]}}],
            "prompt_token_ids": [1, 2, 70000, 0],
        }
    ).encode()  # the standard library's spacing, as the fake upstream writes it
    ids_json, rest = cut_prompt_ids(answer)
    assert json.loads(rest)["prompt_token_ids"] is None
    found = tokens_of(json.loads(rest), prompt_ids_json=ids_json)
    assert list(found.prompt_ids) == [1, 2, 70000, 0] and not found.problem
    assert list(ids_from_json(b"[]")) == []


@pytest.mark.parametrize("raw", [b"[1,2.5]", b"[1,,2]", b"[1,2,]", b"[4294967296]", b"{}"])
def test_malformed_prompt_ids_are_a_named_capture_problem(raw):
    found = tokens_of({"choices": [{"token_ids": [1]}]}, prompt_ids_json=raw)
    assert found.problem.startswith("token_capture_malformed")


@pytest.mark.parametrize("cut", [1, 2, 3, 7, 50])
def test_the_splitter_gives_the_same_events_however_the_stream_is_cut(cut):
    stream = b'data: {"a": 1}\n\n: comment\n\ndata: [1,\n\ndata: [DONE]\n\n'
    stream += b"data: tail"
    pieces = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    splitter = SseSplitter()
    events = [event for piece in pieces for event in splitter.feed(piece)]
    assert events == [b'data: {"a": 1}', b": comment", b"data: [1,", b"data: [DONE]"]
    assert splitter.rest() == b"data: tail"
    crlf = SseSplitter()
    got = [e for p in (b"data: x\r\n", b"\r\ndata: y\r\n\r\n") for e in crlf.feed(p)]
    assert got == [b"data: x", b"data: y"]
