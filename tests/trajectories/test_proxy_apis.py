"""The proxy's Anthropic Messages and OpenAI Responses endpoints, and the session's sampling
overrides, against a canned chat upstream: translated, recorded as chat calls, answered in
the caller's own API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, render, sampled
from trajectories.models import ModelCall
from trajectories.services.recording import recording_session_close, recording_session_create

pytestmark = pytest.mark.django_db

CLAUDE_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "x"}}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "list the files"}]}],
    "tools": [
        {
            "name": "Bash",
            "description": "Run a shell command",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ],
}
CODEX_BODY: dict[str, Any] = {
    "model": "gpt-5-codex",
    "instructions": "You are Codex.",
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    ],
    "store": False,
}


@pytest.fixture
def upstream(settings):
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        yield fake


def post(client, key: str, path: str, body: Any):
    raw = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(f"/proxy/{key}/v1/{path}", data=raw, content_type="application/json")


def sse(response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event of a streamed answer."""
    events = []
    for block in b"".join(response.streaming_content).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append((fields.get("event", ""), json.loads(fields["data"])))
    return events


# --- Anthropic Messages --------------------------------------------------------------------


def test_a_claude_call_is_answered_as_a_message_and_recorded_as_its_chat_call(client, upstream):
    session, key = recording_session_create(user=None)
    response = post(client, key, "messages", CLAUDE_BODY)

    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert answer["model"] == "claude-sonnet-4-5"  # the name the agent asked for
    assert answer["content"] == [{"type": "text", "text": "reply 1"}]
    assert answer["stop_reason"] == "end_turn"
    sent = upstream.requests[-1]["body"]
    assert sent["messages"][0] == {"role": "system", "content": "You are Claude Code."}
    assert sent["tools"][0]["function"]["name"] == "Bash"
    assert sent["return_token_ids"] is True

    call = ModelCall.objects.get(episode=session.episode)
    assert call.api == "messages"
    assert call.request["messages"] == sent["messages"]  # the chat call as sampled
    assert "return_token_ids" not in call.request
    assert call.prompt_token_ids == render(sent["messages"])
    assert call.completion_token_ids == sampled("reply 1")[0]
    assert answer["usage"]["input_tokens"] == len(call.prompt_token_ids)


def test_a_streamed_claude_call_gets_anthropics_events_and_the_same_record(client, upstream):
    session, key = recording_session_create(user=None)
    response = post(client, key, "messages", {**CLAUDE_BODY, "stream": True})

    events = sse(response)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == "reply 1"
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert not any("token_ids" in json.dumps(data) for _, data in events)
    call = ModelCall.objects.get(episode=session.episode)
    assert call.api == "messages" and not call.aborted
    assert call.completion_token_ids == sampled("reply 1")[0]
    assert call.response["choices"][0]["message"]["content"] == "reply 1"


def test_claude_errors_come_back_in_anthropics_shape(client, upstream, settings):
    _, key = recording_session_create(user=None)
    bad = post(client, key, "messages", {**CLAUDE_BODY, "max_tokens": None})
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in bad.json()["error"]["message"]

    unknown = post(client, "hrk_not-a-session", "messages", CLAUDE_BODY)
    assert unknown.status_code == 401
    assert unknown.json()["error"]["type"] == "authentication_error"

    upstream.refuse["chat/completions"] = 400
    refused = post(client, key, "messages", CLAUDE_BODY)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "chat/completions refused"


def test_claude_can_count_its_tokens_as_the_served_template_renders_them(client, upstream):
    _, key = recording_session_create(user=None)
    body = {k: v for k, v in CLAUDE_BODY.items() if k != "max_tokens"}
    response = post(client, key, "messages/count_tokens", body)

    assert response.status_code == 200, response.content
    asked = upstream.tokenize_requests[-1]
    assert response.json() == {"input_tokens": len(render(asked["messages"]))}
    assert not ModelCall.objects.exists()  # a count is not a call


# --- OpenAI Responses ----------------------------------------------------------------------


def test_a_codex_call_is_answered_as_a_response_and_recorded(client, upstream):
    session, key = recording_session_create(user=None)
    response = post(client, key, "responses", CODEX_BODY)

    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["object"] == "response" and answer["status"] == "completed"
    message = next(item for item in answer["output"] if item["type"] == "message")
    assert message["content"][0]["text"] == "reply 1"
    call = ModelCall.objects.get(episode=session.episode)
    assert call.api == "responses"
    assert call.request["messages"][0] == {"role": "system", "content": "You are Codex."}
    assert call.completion_token_ids == sampled("reply 1")[0]


def test_a_streamed_codex_call_gets_response_events_ending_in_completed(client, upstream):
    session, key = recording_session_create(user=None)
    events = sse(post(client, key, "responses", {**CODEX_BODY, "stream": True}))

    names = [name for name, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    numbers = [data["sequence_number"] for _, data in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert text == "reply 1"
    call = ModelCall.objects.get(episode=session.episode)
    assert call.api == "responses" and not call.aborted


def test_a_stream_that_breaks_ends_with_the_apis_own_failure_event(client, settings):
    with FakeOpenAIServer(break_stream_after=3) as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        session, key = recording_session_create(user=None)
        claude = sse(post(client, key, "messages", {**CLAUDE_BODY, "stream": True}))
        codex = sse(post(client, key, "responses", {**CODEX_BODY, "stream": True}))
    assert claude[-1][0] == "error"
    assert codex[-1][0] == "response.failed"
    assert ModelCall.objects.filter(episode=session.episode, aborted=True).count() == 2


# --- sampling overrides --------------------------------------------------------------------


def test_the_sessions_sampling_overrides_every_call_whatever_the_agent_asks(client, upstream):
    session, key = recording_session_create(
        user=None,
        sampling={"model_map": {"*": "fake-model"}, "temperature": 1.0, "max_tokens": 64},
    )
    post(client, key, "messages", {**CLAUDE_BODY, "temperature": 0.0})
    post(client, key, "responses", {**CODEX_BODY, "max_output_tokens": 100000})
    client.post(
        f"/proxy/{key}/v1/chat/completions",
        data=json.dumps({"model": "qwen3", "max_tokens": 32000, "messages": [{"role": "user"}]}),
        content_type="application/json",
    )

    sent = [r["body"] for r in upstream.requests if r["path"].endswith("/chat/completions")]
    assert [b["model"] for b in sent] == ["fake-model"] * 3
    assert [b["temperature"] for b in sent] == [1.0] * 3
    assert [b["max_tokens"] for b in sent] == [64] * 3
    calls = ModelCall.objects.filter(episode=session.episode).order_by("turn_index")
    assert [c.request["temperature"] for c in calls] == [1.0] * 3  # recorded as sampled
    assert {c.policy_version for c in calls} == {"fake-model"}


def test_the_default_clamp_lets_a_cli_asking_32000_tokens_be_recorded(client, upstream):
    # Qwen Code's default against an 8,192-token server: refused without the clamp.
    open_session, key = recording_session_create(user=None)
    body = {"model": "fake-model", "max_tokens": 32000, "messages": [{"role": "user"}]}
    clamped = client.post(
        f"/proxy/{key}/v1/chat/completions", data=json.dumps(body), content_type="application/json"
    )
    assert clamped.status_code == 200, clamped.content
    assert upstream.requests[-1]["body"]["max_tokens"] == 8192

    _, unclamped_key = recording_session_create(user=None, sampling={"clamp": False})
    refused = client.post(
        f"/proxy/{unclamped_key}/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert "max_model_len=8192" in refused.json()["error"]["message"]
    recording_session_close(session=open_session)
    assert open_session.episode.model_calls.get().error == ""


def test_a_bad_override_is_refused_when_the_session_is_created(admin_client):
    response = admin_client.post(
        "/api/recordings/",
        data=json.dumps({"sampling": {"temperature": 9}}),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "sampling.temperature" in response.json()
