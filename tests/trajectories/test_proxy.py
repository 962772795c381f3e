"""The recording proxy against a canned upstream: forwarding, recording, streaming, security."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.fakes.openai_server import FakeOpenAIServer, render, sampled
from trajectories.models import EpisodeKind, EpisodeStatus, ModelCall, RecordingSession
from trajectories.selectors.recording import recording_trajectory
from trajectories.services.recording import (
    recording_session_close,
    recording_session_create,
    recording_session_revoke,
)

pytestmark = pytest.mark.django_db

SYSTEM = {"role": "system", "content": "You are a careful agent."}


@pytest.fixture
def upstream(settings):
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        yield fake


@pytest.fixture
def session_and_key():
    return recording_session_create(user=None, name="test")


def chat(client, key: str, body: dict[str, Any], **extra: Any):
    return client.post(
        f"/proxy/{key}/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
        **extra,
    )


def streamed_body(response) -> tuple[list[dict[str, Any]], bool]:
    chunks, done = [], False
    for event in b"".join(response.streaming_content).split(b"\n\n"):
        if event.startswith(b"data: [DONE]"):
            done = True
        elif event.startswith(b"data: "):
            chunks.append(json.loads(event[6:]))
    return chunks, done


# --- forwarding and recording --------------------------------------------------------------


def test_a_call_is_forwarded_with_token_capture_and_answered_without_it(
    client, upstream, session_and_key
):
    session, key = session_and_key
    messages = [SYSTEM, {"role": "user", "content": "hi"}]
    response = chat(client, key, {"model": "fake-model", "messages": messages})

    assert response.status_code == 200
    sent = upstream.requests[-1]["body"]
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert sent["top_logprobs"] == 0
    answer = response.json()
    # The agent sees what it would have seen without the proxy.
    assert answer["prompt_token_ids"] is None  # as vLLM answers when not asked
    assert answer["choices"][0]["token_ids"] is None
    assert answer["choices"][0]["logprobs"] is None
    assert answer["choices"][0]["message"]["content"] == "reply 1"

    call = ModelCall.objects.get(episode=session.episode)
    ids, logprobs = sampled("reply 1")
    assert call.prompt_token_ids == render(messages)
    assert call.completion_token_ids == ids
    assert call.completion_logprobs == pytest.approx(logprobs, abs=1e-6)
    assert call.policy_version == "fake-model"
    assert call.request == {"model": "fake-model", "messages": messages}  # as the agent sent it
    assert call.turn_index == 0 and call.agent and not call.aborted


def test_a_caller_that_asks_for_token_ids_and_logprobs_gets_them(client, upstream, session_and_key):
    _, key = session_and_key
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "return_token_ids": True,
        "logprobs": True,
        "top_logprobs": 2,
    }
    answer = chat(client, key, body).json()
    assert upstream.requests[-1]["body"]["top_logprobs"] == 2  # the caller's choice stands
    assert answer["prompt_token_ids"] == render(body["messages"])
    assert answer["choices"][0]["token_ids"] == sampled("reply 1")[0]
    assert answer["choices"][0]["logprobs"]["content"]


def test_a_multi_turn_session_reconstructs_into_one_chain_with_loss_masks(
    client, upstream, session_and_key
):
    session, key = session_and_key
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "find it"}]
    for turn in range(3):
        reply = chat(client, key, {"model": "m", "messages": messages}).json()
        messages += [
            {"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
            {"role": "tool", "content": f"result {turn}"},
        ]
    trajectory = recording_trajectory(session=session)

    assert len(trajectory["chains"]) == 1
    chain = trajectory["chains"][0]
    assert chain["role"] == "main" and len(chain["call_ids"]) == 3
    # Exactly the three replies are trained on; the tool results and markup are masked.
    trained = [t for t, m in zip(chain["token_ids"], chain["loss_mask"], strict=True) if m]
    assert trained == sampled("reply 1")[0] + sampled("reply 2")[0] + sampled("reply 3")[0]
    assert [b["reason"] for b in trajectory["breaks"]] == ["first_call"]
    assert trajectory["trainable"]
    assert len(recording_trajectory(session=session, mode="request")["chains"]) == 3


def test_subagents_and_compaction_show_as_named_chain_breaks(client, upstream, session_and_key):
    session, key = session_and_key
    main = [SYSTEM, {"role": "user", "content": "a long task"}]
    chat(client, key, {"model": "m", "messages": main})
    sub = [{"role": "system", "content": "You are a subagent."}, {"role": "user", "content": "x"}]
    chat(client, key, {"model": "m", "messages": sub})
    compacted = [SYSTEM, {"role": "user", "content": "summary"}]
    chat(client, key, {"model": "m", "messages": compacted})

    trajectory = recording_trajectory(session=session)
    roles = [c["role"] for c in trajectory["chains"]]
    reasons = [b["reason"] for b in trajectory["breaks"]]
    assert roles == ["main", "main", "subagent"]
    assert reasons[0] == "first_call"
    assert reasons[1].startswith("context_compaction")
    assert reasons[2] == "subagent_start"


def test_a_streamed_call_is_recorded_exactly_as_a_whole_one(client, settings):
    fake = FakeOpenAIServer(reply=lambda n, body: "the same reply")
    with fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        _stream_and_compare(client)


def _stream_and_compare(client) -> None:
    messages = [SYSTEM, {"role": "user", "content": "stream me"}]
    whole_session, whole_key = recording_session_create(user=None)
    streamed_session, streamed_key = recording_session_create(user=None)

    whole = chat(client, whole_key, {"model": "m", "messages": messages}).json()
    response = chat(client, streamed_key, {"model": "m", "messages": messages, "stream": True})
    assert response["Content-Type"].startswith("text/event-stream")
    chunks, done = streamed_body(response)

    assert done
    assert all(c["choices"][0].get("token_ids") is None for c in chunks if c["choices"])
    assert all(c.get("prompt_token_ids") is None for c in chunks)
    assert all(c["choices"][0].get("logprobs") is None for c in chunks if c["choices"])
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    a = ModelCall.objects.get(episode=whole_session.episode)
    b = ModelCall.objects.get(episode=streamed_session.episode)
    assert b.token_fields() == a.token_fields()
    assert b.response["choices"][0]["message"]["content"] == text
    assert b.finish_reason == a.finish_reason == "stop"
    assert not b.error


def test_a_stream_reaches_the_agent_event_by_event(client, settings, session_and_key):
    # The upstream sends two events, then waits: the agent must already have them.
    session, key = session_and_key
    with FakeOpenAIServer(hold_stream_after=2) as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        response = chat(client, key, {"model": "m", "messages": [SYSTEM], "stream": True})
        pieces = iter(response.streaming_content)
        assert next(pieces) == b""  # the headers go out before the first event
        first = next(pieces)
        assert fake.holding.wait(10) and not fake.hold_expired
        assert first.startswith(b"data: ")
        assert not ModelCall.objects.filter(episode=session.episode).exists()
        fake.release.set()
        for piece in pieces:
            if piece.startswith(b"data: [DONE]"):
                # Stored before the agent reads the end of the stream.
                call = ModelCall.objects.get(episode=session.episode)
    assert not call.aborted and call.completion_token_ids


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_hangs_up_mid_stream_is_recorded_at_once_as_aborted(
    client, settings, session_and_key
):
    session, key = session_and_key
    with FakeOpenAIServer(hold_stream_after=2) as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        response = chat(client, key, {"model": "m", "messages": [SYSTEM], "stream": True})
        next(iter(response.streaming_content))
        # The agent hangs up while the model is still generating: the server closes the
        # response (which also closes this thread's database connection, hence
        # transaction=True).
        response.close()
        # Recorded without waiting for the rest of the generation.
        assert not fake.hold_expired
        call = ModelCall.objects.get(episode=session.episode)
        fake.release.set()
    assert call.aborted and call.error.startswith("client_disconnected")


def test_a_broken_stream_is_recorded_as_aborted(client, settings, session_and_key):
    session, key = session_and_key
    with FakeOpenAIServer(break_stream_after=3) as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        response = chat(client, key, {"model": "m", "messages": [SYSTEM], "stream": True})
        chunks, done = streamed_body(response)
    assert not done
    # The agent's client is told, in vLLM's mid-stream error event, not left with a cut-off
    # stream that reads like a whole one.
    assert chunks[-1]["error"]["code"] == 502
    assert "stream_broken" in chunks[-1]["error"]["message"]
    call = ModelCall.objects.get(episode=session.episode)
    assert call.aborted and call.error.startswith("stream_broken")
    session.refresh_from_db()
    assert session.untrainable_reason.startswith("aborted_call")


def test_an_unreachable_upstream_answers_502_and_records_the_aborted_call(
    client, settings, session_and_key
):
    session, key = session_and_key
    settings.PROXY_UPSTREAM_URL = "http://127.0.0.1:9/v1"  # nothing listens on port 9
    response = chat(client, key, {"model": "m", "messages": [SYSTEM]})

    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_unreachable"
    assert "did not answer" in error["message"]
    call = ModelCall.objects.get(episode=session.episode)
    assert call.aborted and call.error.startswith("upstream_unreachable")
    session.refresh_from_db()
    assert not session.trainable


def test_a_model_that_answers_too_late_is_a_timeout_recorded_as_aborted(
    client, settings, session_and_key
):
    session, key = session_and_key
    settings.PROXY_TIMEOUT_S = 0.2
    with FakeOpenAIServer(delay_s=1.0) as slow:
        settings.PROXY_UPSTREAM_URL = slow.base_url
        response = chat(client, key, {"model": "m", "messages": [SYSTEM]})
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "model_timeout"
    call = ModelCall.objects.get(episode=session.episode)
    assert call.aborted and call.error.startswith("model_timeout")


def test_an_upstream_refusal_is_passed_through_and_does_not_spoil_the_session(
    client, upstream, session_and_key
):
    session, key = session_and_key
    response = chat(client, key, {"model": "m", "messages": [SYSTEM], "max_tokens": -1})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "max_tokens must be positive"}}
    call = ModelCall.objects.get(episode=session.episode)
    assert call.error.startswith("upstream_400") and not call.aborted
    session.refresh_from_db()
    assert session.trainable


def test_calls_served_by_two_policy_versions_make_the_session_untrainable(
    client, upstream, session_and_key
):
    session, key = session_and_key
    chat(client, key, {"model": "base", "messages": [SYSTEM]})
    chat(client, key, {"model": "adapter-step-1", "messages": [SYSTEM]})
    session.refresh_from_db()
    assert session.untrainable_reason == "mixed_policy_versions: base, adapter-step-1"


def test_a_bad_request_gets_a_400_naming_the_field(client, upstream, session_and_key):
    _, key = session_and_key
    response = chat(client, key, {"model": "m", "messages": []})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"
    response = chat(client, key, {"model": "m", "messages": [SYSTEM], "n": 3})
    assert response.json()["error"]["param"] == "n"
    assert upstream.requests == []


def test_models_are_listed_through_the_proxy(client, upstream, session_and_key):
    _, key = session_and_key
    response = client.get(f"/proxy/{key}/v1/models")
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "fake-model"


# --- security ------------------------------------------------------------------------------


def test_an_expired_key_is_refused(client, upstream, session_and_key):
    session, key = session_and_key
    RecordingSession.objects.filter(pk=session.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = chat(client, key, {"model": "m", "messages": [SYSTEM]})
    assert response.status_code == 403
    assert "expired" in response.json()["error"]["message"]
    assert client.get(f"/proxy/{key}/v1/models").status_code == 403
    assert upstream.requests == []


def test_a_revoked_or_closed_key_is_refused(client, upstream):
    revoked, revoked_key = recording_session_create(user=None)
    recording_session_revoke(session=revoked)
    closed, closed_key = recording_session_create(user=None)
    recording_session_close(session=closed, reward=1.0)
    for key, word in ((revoked_key, "revoked"), (closed_key, "closed")):
        response = chat(client, key, {"model": "m", "messages": [SYSTEM]})
        assert response.status_code == 403
        assert word in response.json()["error"]["message"]
    assert upstream.requests == []


def test_an_unknown_or_foreign_key_is_refused_and_records_nothing(client, upstream):
    mine, my_key = recording_session_create(user=None)
    other, _ = recording_session_create(user=None)
    forged = my_key[:-4] + ("AAAA" if not my_key.endswith("AAAA") else "BBBB")
    for key in (forged, "hrk_" + "x" * 43, "sk-openai-key", other.key_hash):
        response = chat(client, key, {"model": "m", "messages": [SYSTEM]})
        assert response.status_code == 401, key
        assert response.json()["error"]["type"] == "invalid_session_key"
    # A key opens its own session only: calls with it never land in another one.
    chat(client, my_key, {"model": "m", "messages": [SYSTEM]})
    assert ModelCall.objects.filter(episode=mine.episode).count() == 1
    assert ModelCall.objects.filter(episode=other.episode).count() == 0
    assert len(upstream.requests) == 1


def test_the_key_is_stored_only_as_a_hash(session_and_key):
    session, key = session_and_key
    stored = json.dumps(list(RecordingSession.objects.values()), default=str)
    assert key not in stored
    assert session.key_hint == key[:12]


def test_no_request_can_choose_the_upstream(client, settings, session_and_key):
    _, key = session_and_key
    with FakeOpenAIServer() as configured, FakeOpenAIServer() as elsewhere:
        settings.PROXY_UPSTREAM_URL = configured.base_url
        body = {
            "model": "m",
            "messages": [SYSTEM],
            "base_url": elsewhere.base_url,
            "api_base": elsewhere.base_url,
        }
        response = client.post(
            f"/proxy/{key}/v1/chat/completions?base_url={elsewhere.base_url}&upstream=x",
            data=json.dumps(body),
            content_type="application/json",
            headers={
                "Host": "127.0.0.1",
                "X-Forwarded-Host": elsewhere.base_url,
                "X-Upstream-Url": elsewhere.base_url,
                "Authorization": "Bearer caller-secret",
            },
        )
        assert response.status_code == 200
        assert (
            client.get(f"/proxy/{key}/v1/models?base_url={elsewhere.base_url}").status_code == 200
        )
    assert elsewhere.requests == []
    assert len(configured.requests) == 2
    forwarded = configured.requests[0]
    assert forwarded["path"] == "/v1/chat/completions"
    # None of the caller's headers travels on: not its credentials, not its routing hints.
    headers = {k.lower() for k in forwarded["headers"]}
    assert not headers & {"authorization", "x-forwarded-host", "x-upstream-url", "cookie"}


def test_the_upstream_gets_the_proxys_api_key_never_the_callers(client, settings, upstream):
    _, key = recording_session_create(user=None)
    settings.PROXY_UPSTREAM_API_KEY = "sk-upstream"
    secret = {"Authorization": "Bearer caller-secret"}
    chat(client, key, {"model": "m", "messages": [SYSTEM]}, headers=secret)
    # Read to the end, so the call is recorded inside this test (an answer left unread
    # would be settled when it is collected, after the test's database is gone).
    streamed_body(
        chat(client, key, {"model": "m", "messages": [SYSTEM], "stream": True}, headers=secret)
    )
    client.get(f"/proxy/{key}/v1/models", headers=secret)
    sent = [{k.lower(): v for k, v in r["headers"].items()} for r in upstream.requests]
    assert [h.get("authorization") for h in sent] == ["Bearer sk-upstream"] * 3


def test_a_recorded_session_is_an_episode_of_kind_recorded(session_and_key):
    session, _ = session_and_key
    episode = session.episode
    assert episode.kind == EpisodeKind.RECORDED and episode.is_recorded
    assert episode.status == EpisodeStatus.RUNNING
    assert episode.batch_id is None and episode.query_id is None
