"""One error path for the three APIs: each dialect says an error in its API's own shape,
through the one shaper (`error_body`), whole or in the middle of a stream."""

from __future__ import annotations

import orjson
import pytest

from harness_app.wire.chat import Asked
from harness_app.wire.dialects import CHAT, MESSAGES, RESPONSES
from harness_app.wire.errors import MESSAGES_API, error_body

ASKED = Asked(token_ids=False, logprobs=False, stream=True)


def test_openai_apis_answer_an_error_with_its_kind_and_field():
    for dialect in (CHAT, RESPONSES):
        answer = dialect.error(400, "max_tokens must be positive", "invalid_request_error", "n")
        assert answer.status == 400 and answer.content_type == "application/json"
        assert orjson.loads(answer.body) == {
            "error": {
                "message": "max_tokens must be positive",
                "type": "invalid_request_error",
                "param": "n",
                "code": 400,
            }
        }


def test_anthropics_api_names_the_field_in_the_message():
    answer = MESSAGES.error(429, "slow down", "rate_limit_exceeded", "messages[0]")
    assert answer.status == 429
    assert orjson.loads(answer.body) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down (messages[0])"},
    }


def test_chat_passes_the_upstreams_refusal_on_and_anthropic_says_it_again():
    vllm = b'{"error": {"message": "prompt too long", "type": "BadRequestError"}}'
    for dialect in (CHAT, RESPONSES):
        assert dialect.refused(400, vllm, "application/json").body == vllm
    said = orjson.loads(MESSAGES.refused(400, vllm, "application/json").body)
    assert said["error"]["message"] == "prompt too long"


def test_a_stream_that_breaks_off_ends_with_an_error_event_in_each_api():
    chat = CHAT.stream({}, ASKED).error("stream_broken: gone")
    assert orjson.loads(chat.removeprefix(b"data: ")) == {
        "error": {
            "message": "the model server broke off: stream_broken: gone",
            "type": "api_error",
            "param": None,
            "code": 502,
        }
    }
    messages = MESSAGES.stream({"model": "m"}, ASKED).error("stream_broken: gone")
    assert messages.startswith(b"event: error\n")
    assert b'"type":"api_error","message":"stream_broken: gone"' in messages
    responses = RESPONSES.stream({"model": "m"}, ASKED).error("stream_broken: gone")
    assert b"event: response.failed" in responses and b"stream_broken: gone" in responses


def test_an_upstream_answer_that_is_not_json_goes_on_in_chat_and_is_a_502_elsewhere():
    assert CHAT.not_json(200, b"<html>", "text/html").body == b"<html>"
    for dialect in (MESSAGES, RESPONSES):
        assert dialect.not_json(200, b"<html>", "text/html").status == 502


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_errors_take_their_type_from_the_status(status, kind):
    assert error_body(MESSAGES_API, status, "no", "ignored") == {
        "type": "error",
        "error": {"type": kind, "message": "no"},
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{"error": {"message": "prompt too long", "type": "BadRequestError"}}',
            "prompt too long",
        ),
        (b'{"object": "error", "message": "old shape", "code": 400}', "old shape"),
        (b"Internal Server Error", "Internal Server Error"),
        (b"", "the model server answered HTTP 400"),
    ],
)
def test_an_upstream_refusal_said_again_in_anthropics_shape_keeps_its_message(content, message):
    refused = MESSAGES.refused(400, content, "application/json")
    assert refused.status == 400
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    assert orjson.loads(refused.body) == body
