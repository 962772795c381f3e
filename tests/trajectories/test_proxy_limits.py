"""Per-key limits on the recording proxy: one key cannot hold every web thread or flood
the model server, and is told so in its own API's error shape with Retry-After."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import ModelCall
from trajectories.services.recording import recording_session_create

pytestmark = pytest.mark.django_db

SYSTEM = {"role": "system", "content": "You are a careful agent."}
CHAT = {"model": "m", "messages": [SYSTEM]}
MESSAGES = {
    "model": "m",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hello"}],
}


def post(client, key: str, path: str, body: dict[str, Any]):
    return client.post(
        f"/proxy/{key}/v1/{path}", data=json.dumps(body), content_type="application/json"
    )


@pytest.fixture
def key(settings):
    settings.PROXY_MAX_CONCURRENT_CALLS_PER_KEY = 1
    settings.PROXY_MAX_CALLS_PER_MINUTE_PER_KEY = 0
    return recording_session_create(user=None, name="limits")[1]


def test_a_key_over_its_calls_in_flight_gets_429_in_its_own_api(client, settings, key):
    with FakeOpenAIServer(hold_stream_after=1) as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        held = post(client, key, "chat/completions", {**CHAT, "stream": True})
        pieces = iter(held.streaming_content)
        while not fake.holding.is_set():
            next(pieces)
        # The first call is still streaming: a second one, in either API, is refused.
        refused = post(client, key, "chat/completions", CHAT)
        assert refused.status_code == 429 and refused["Retry-After"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_exceeded"
        assert "PROXY_MAX_CONCURRENT_CALLS_PER_KEY=1" in refused.json()["error"]["message"]
        anthropic = post(client, key, "messages", MESSAGES)
        assert anthropic.status_code == 429
        assert anthropic.json()["error"]["type"] == "rate_limit_error"
        # Another key is not held back by this one.
        _, other = recording_session_create(user=None, name="other")
        assert post(client, other, "chat/completions", CHAT).status_code == 200
        fake.release.set()
        b"".join(pieces)  # read to the end: the test client closes the answer
        # The stream is over: its place is free again.
        assert post(client, key, "chat/completions", CHAT).status_code == 200
    # The refused calls never reached the model server.
    assert [r["path"] for r in fake.requests].count("/v1/chat/completions") == 3


@pytest.mark.django_db(transaction=True)  # closing the answer closes the connection too
def test_a_stream_closed_unread_gives_its_place_back(client, settings, key):
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        unread = post(client, key, "chat/completions", {**CHAT, "stream": True})
        assert post(client, key, "chat/completions", CHAT).status_code == 429
        unread.close()  # the agent hung up before reading a byte
        # Recorded as aborted at once, and its place is free again.
        (aborted,) = ModelCall.objects.filter(aborted=True)
        assert aborted.error.startswith("client_disconnected")
        assert post(client, key, "chat/completions", CHAT).status_code == 200


def test_a_failed_call_gives_its_place_back(client, settings, key):
    settings.PROXY_UPSTREAM_URL = "http://127.0.0.1:9/v1"  # nothing listens there
    assert post(client, key, "chat/completions", CHAT).status_code == 502
    assert post(client, key, "chat/completions", CHAT).status_code == 502  # not 429


def test_a_key_over_its_calls_per_minute_waits(client, settings):
    settings.PROXY_MAX_CONCURRENT_CALLS_PER_KEY = 0
    settings.PROXY_MAX_CALLS_PER_MINUTE_PER_KEY = 2
    session, key = recording_session_create(user=None, name="rate")
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        assert [post(client, key, "chat/completions", CHAT).status_code for _ in range(2)] == [
            200,
            200,
        ]
        refused = post(client, key, "responses", {"model": "m", "input": "hi"})
        assert refused.status_code == 429
        # One call each 30 s at 2 a minute, and the bucket was just emptied.
        assert 1 <= int(refused["Retry-After"]) <= 30
        assert "PROXY_MAX_CALLS_PER_MINUTE_PER_KEY" in refused.json()["error"]["message"]
    assert ModelCall.objects.filter(episode=session.episode).count() == 2
