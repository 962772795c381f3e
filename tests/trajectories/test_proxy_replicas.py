"""The recording proxy over two upstream replicas (PROXY_UPSTREAM_URLS): calls spread by
the calls in flight, a stream stays on its replica until closed, and a replica that
answers 5xx is left out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import ModelCall
from trajectories.services.recording import recording_session_create

pytestmark = pytest.mark.django_db

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def replicas(settings):
    with FakeOpenAIServer(hold_stream_after=2) as a, FakeOpenAIServer() as b:
        settings.PROXY_UPSTREAM_URLS = [a.base_url, b.base_url]
        settings.PROXY_UPSTREAM_URL = a.base_url
        yield a, b


def chat(client, key: str, **body: Any):
    return client.post(
        f"/proxy/{key}/v1/chat/completions",
        data=json.dumps({"model": "fake-model", "messages": MESSAGES, **body}),
        content_type="application/json",
    )


def test_calls_are_spread_over_the_replicas_and_all_recorded(client, replicas):
    a, b = replicas
    session, key = recording_session_create(user=None)
    for _ in range(4):
        assert chat(client, key).status_code == 200
    assert (a.calls, b.calls) == (2, 2)
    assert ModelCall.objects.filter(episode=session.episode).count() == 4


def test_a_stream_keeps_its_replica_until_it_is_closed(client, replicas):
    a, b = replicas
    _, key = recording_session_create(user=None)
    response = chat(client, key, stream=True)
    pieces = iter(response.streaming_content)
    next(pieces), next(pieces)
    assert a.holding.wait(10)  # the stream is on a, paused mid-way

    assert chat(client, key).status_code == 200  # a has a call in flight: b takes it
    assert chat(client, key).status_code == 200
    assert (a.calls, b.calls) == (1, 2)

    a.release.set()
    rest = b"".join(pieces)
    assert b"data: [DONE]" in rest
    response.close()
    chat(client, key)  # both idle again, and a's turn
    assert (a.calls, b.calls) == (2, 2)


def test_a_replica_that_answers_5xx_is_left_out(client, replicas):
    a, b = replicas
    a.refuse = {"chat/completions": 503}
    session, key = recording_session_create(user=None)
    assert chat(client, key).status_code == 503  # the agent sees the refusal
    for _ in range(3):
        assert chat(client, key).status_code == 200
    assert (a.calls, b.calls) == (0, 3)
    calls = ModelCall.objects.filter(episode=session.episode).order_by("pk")
    assert [c.aborted for c in calls] == [True, False, False, False]


def test_every_replica_down_is_answered_502_naming_them(client, settings):
    settings.PROXY_UPSTREAM_URLS = ["http://127.0.0.1:9/v1", "http://127.0.0.1:7/v1"]
    settings.PROXY_UPSTREAM_URL = "http://127.0.0.1:9/v1"
    _, key = recording_session_create(user=None)
    assert chat(client, key).status_code == 502
    assert chat(client, key).status_code == 502
    answer = chat(client, key)
    assert answer.status_code == 502
    message = answer.json()["error"]["message"]
    assert "every model server replica is down" in message
    assert "http://127.0.0.1:9/v1" in message and "http://127.0.0.1:7/v1" in message
