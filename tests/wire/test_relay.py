"""A streamed chat answer relayed in each API and folded into the call it records: the
same whatever the pieces' boundaries, and the outcome recorded the same way for every API."""

from __future__ import annotations

import orjson
import pytest

from harness_app.wire.chat import Asked
from harness_app.wire.dialects import CHAT, MESSAGES, RESPONSES, Dialect
from harness_app.wire.record import CallOutcome
from harness_app.wire.relay import Relay

PROMPT = [101, 102, 103, 104]
NOT_ASKED = Asked(token_ids=False, logprobs=False, stream=True)
ASKED_ALL = Asked(token_ids=True, logprobs=True, stream=True)


def event(chunk: dict) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def choice(delta: dict, token: int, logprob: float, finish: str | None = None) -> dict:
    return {
        "index": 0,
        "delta": delta,
        "token_ids": [token],
        "logprobs": {"content": [{"token": str(token), "logprob": logprob}]},
        "finish_reason": finish,
    }


UPSTREAM = (
    event(
        {
            "id": "chatcmpl-1",
            "model": "served",
            "prompt_token_ids": PROMPT,
            "choices": [choice({"role": "assistant", "content": "Hel"}, 7, -0.5)],
        }
    )
    + b": a comment\n\n"
    + event({"id": "chatcmpl-1", "choices": [choice({"content": "lo"}, 8, -0.25, "stop")]})
    + event({"id": "chatcmpl-1", "choices": [], "usage": {"completion_tokens": 2}})
    + b"data: [DONE]\n\n"
)


def relayed(dialect: Dialect, asked: Asked, size: int) -> tuple[Relay, bytes]:
    relay = Relay(dialect.stream({"model": "asked-for"}, asked))
    out = b""
    for start in range(0, len(UPSTREAM), size):
        out += b"".join(relay.feed(UPSTREAM[start : start + size]))
    return relay, out + b"".join(relay.end())


@pytest.mark.parametrize("dialect", [CHAT, MESSAGES, RESPONSES], ids=lambda d: d.api)
def test_every_api_relays_the_same_events_whatever_the_pieces(dialect):
    _, whole = relayed(dialect, NOT_ASKED, len(UPSTREAM))
    _, bytewise = relayed(dialect, NOT_ASKED, 1)
    if dialect is not RESPONSES:  # Responses stamps its events with the time
        assert bytewise == whole
    assert b"Hel" in whole and b"lo" in whole


@pytest.mark.parametrize("dialect", [CHAT, MESSAGES, RESPONSES], ids=lambda d: d.api)
def test_every_api_records_the_folded_answer_with_its_tokens(dialect):
    relay, _ = relayed(dialect, NOT_ASKED, 5)
    assert relay.done
    outcome = relay.answered()
    assert (outcome.error, outcome.aborted) == ("", False)
    assert list(outcome.tokens.prompt_ids) == PROMPT
    assert list(outcome.tokens.completion_ids) == [7, 8]
    assert list(outcome.tokens.logprobs) == [-0.5, -0.25]
    message = outcome.response["choices"][0]["message"]
    assert message["content"] == "Hello"
    # the ids are stored once, as blobs, not again in the JSON
    assert "prompt_token_ids" not in outcome.response
    assert "token_ids" not in outcome.response["choices"][0]


def test_a_chat_caller_gets_no_token_capture_it_did_not_ask_for():
    _, out = relayed(CHAT, NOT_ASKED, 9)
    chunks = [orjson.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    assert chunks[0]["prompt_token_ids"] is None
    assert all(c["token_ids"] is None and c["logprobs"] is None for c in chunks[0]["choices"])
    assert b": a comment\n\n" in out and out.endswith(b"data: [DONE]\n\n")


def test_a_chat_caller_that_asked_for_everything_gets_the_upstreams_bytes():
    _, out = relayed(CHAT, ASKED_ALL, 9)
    assert out == UPSTREAM


def test_a_translated_stream_counts_the_prompt_from_the_ids_it_cut_out():
    _, out = relayed(MESSAGES, NOT_ASKED, 9)
    start = out.split(b"\n\n")[0]
    assert start.startswith(b"event: message_start")
    assert orjson.loads(start.split(b"data: ")[1])["message"]["usage"]["input_tokens"] == 4
    assert b"101" not in out  # no id reaches the agent


def test_a_broken_stream_is_recorded_as_what_had_come_and_aborted():
    relay = Relay(MESSAGES.stream({"model": "m"}, NOT_ASKED))
    list(relay.feed(UPSTREAM[: UPSTREAM.index(b": a comment")]))
    assert not relay.done
    outcome = relay.broken("stream_broken: the stream ended before [DONE]")
    assert outcome.aborted and outcome.error.startswith("stream_broken")
    assert outcome.response["choices"][0]["message"]["content"] == "Hel"


def test_a_refusal_the_agent_went_on_from_is_recorded_but_not_aborted():
    refused = CallOutcome.refused(400, "context too long " * 100)
    assert not refused.aborted and refused.error.startswith("upstream_400: context too long")
    assert len(refused.error) == len("upstream_400: ") + 500
    assert CallOutcome.refused(502, "gone").aborted


def test_an_answer_missing_its_token_capture_is_recorded_as_aborted():
    outcome = CallOutcome.answered({"choices": [{"message": {"content": "hi"}}]})
    assert outcome.aborted and outcome.error.startswith("token_capture_missing")
