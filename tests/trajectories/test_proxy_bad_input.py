"""Bad input and a lost database on the recording proxy: a body nested too deeply, a chunked
body (no Content-Length) sent to gunicorn, and the database down on the WSGI short path.
Each is answered in the caller's own API's error shape, never a 500 or the site's HTML."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection, connections

from harness_app.json_body import MAX_JSON_DEPTH
from tests.fakes.openai_server import FakeOpenAIServer
from tests.paths import ROOT
from tests.trajectories.test_proxy_wsgi import served  # noqa: F401  (the fixture)
from trajectories.models import ModelCall
from trajectories.services.recording import recording_session_create

SYSTEM = {"role": "system", "content": "You are a careful agent."}
ENDPOINTS = ["chat/completions", "messages", "messages/count_tokens", "responses"]


def openai_message(answer: Any) -> str:
    body = answer.json()
    assert set(body) == {"error"}
    return str(body["error"]["message"])


def anthropic_message(answer: Any) -> str:
    body = answer.json()
    assert body["type"] == "error"
    return str(body["error"]["message"])


def message_of(endpoint: str, answer: Any) -> str:
    if endpoint.startswith("messages"):
        return anthropic_message(answer)
    return openai_message(answer)


# --- nesting -------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("levels", [50_000, MAX_JSON_DEPTH + 1, 300])
def test_a_body_nested_too_deeply_is_400_in_the_callers_shape(client, settings, endpoint, levels):
    # 300 levels: orjson reads them, but could not write the call it forwards (a 500).
    _, key = recording_session_create(user=None, name="deep")
    deep = "[" * levels + "]" * levels
    valid = '"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]'
    body = "{" + valid + ', "input": "hi", "metadata": ' + deep + "}"
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        answer = client.post(f"/proxy/{key}/v1/{endpoint}", body, content_type="application/json")
    assert answer.status_code == 400
    assert fake.calls == 0
    message = message_of(endpoint, answer)
    assert "nested too deeply" in message and f"at most {MAX_JSON_DEPTH} levels" in message


# --- the database down ---------------------------------------------------------------------


@pytest.fixture
def database_down(monkeypatch):
    """Call it to refuse every new database connection, as with the server stopped (the
    short path's request threads each open their own)."""
    wrapper = connections["default"]

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise wrapper.Database.OperationalError("connection refused")

    return lambda: monkeypatch.setattr(type(wrapper), "get_new_connection", refused)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("endpoint", [*ENDPOINTS, "models"])
def test_with_the_database_down_the_short_path_answers_503_in_the_callers_shape(
    served,  # noqa: F811
    settings,
    endpoint,
    database_down,
):
    base, _ = served
    settings.PROXY_AUTH_CACHE_S = 0  # every call looks its session up
    _, key = recording_session_create(user=None, name="down")
    database_down()
    body = {"model": "m", "max_tokens": 8, "messages": [SYSTEM], "input": "hi"}
    url = f"{base}/proxy/{key}/v1/{endpoint}"
    if endpoint == "models":
        answer = httpx.get(url, timeout=10)
    else:
        answer = httpx.post(url, json=body, timeout=10)
    assert answer.status_code == 503
    assert answer.headers["content-type"].startswith("application/json")
    assert "database" in message_of(endpoint, answer)
    assert answer.headers["retry-after"]


# --- chunked bodies, through gunicorn ------------------------------------------------------


@pytest.fixture
def gunicorn(tmp_path) -> Iterator[tuple[str, FakeOpenAIServer]]:
    """config.wsgi:application under gunicorn (it reads chunked bodies; the test servers do
    not) on the test database, with a canned upstream behind the proxy."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        database_url = f"sqlite:///{db['NAME']}"
    else:
        database_url = (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}"
        )
    with FakeOpenAIServer(keep_requests=True) as fake:
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "HARNESS_DATA_DIR": str(settings.DATA_DIR),
            "PROXY_UPSTREAM_URL": fake.base_url,
            "PROXY_AUTH_CACHE_S": "0",
        }
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "config.wsgi:application",
                f"--bind=127.0.0.1:{port}",
                "--threads=2",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "gunicorn.log").open("wb"),
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{base}/healthz", timeout=5)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and server.poll() is None, "no gunicorn"
                    time.sleep(0.1)
            yield base, fake
        finally:
            server.terminate()
            server.wait(timeout=30)


def _chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_is_read_whole(gunicorn):
    base, fake = gunicorn
    session, key = recording_session_create(user=None, name="chunked")
    question = {"role": "user", "content": "x" * 5000}
    body = json.dumps({"model": "m", "messages": [SYSTEM, question]}).encode()
    answer = httpx.post(
        f"{base}/proxy/{key}/v1/chat/completions",
        content=_chunks(body),  # an iterator: httpx sends it chunked, with no Content-Length
        headers={"content-type": "application/json"},
        timeout=20,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "reply 1"
    assert fake.requests[-1]["body"]["messages"][-1]["content"] == "x" * 5000
    assert ModelCall.objects.filter(episode=session.episode).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_over_the_size_limit_is_413(gunicorn):
    base, fake = gunicorn
    _, key = recording_session_create(user=None, name="chunked")
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 3_000_000}]})
    answer = httpx.post(
        f"{base}/proxy/{key}/v1/messages",
        content=_chunks(big.encode(), 64 * 1024),
        headers={"content-type": "application/json"},
        timeout=20,
    )
    assert answer.status_code == 413
    assert "too large" in anthropic_message(answer)
    assert not fake.requests
