"""Repeated failed logins lock out the username and the address (issue 21.6, django-axes).

/login/ and POST /api/token/ count alike. With Redis configured, the counts live there, so
every web process sees them; without it, in the database.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis
from django.test import Client, override_settings

from tests import factories

pytestmark = pytest.mark.django_db

LIMIT = 3
RIGHT = {"username": "rita", "password": "pw-123456"}
WRONG = {"username": "rita", "password": "wrong"}


@pytest.fixture(autouse=True)
def _small_limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT


def test_login_page_locks_a_username_out_after_repeated_failures(researcher):
    client = Client()
    for _ in range(LIMIT - 1):
        assert client.post("/login/", WRONG).status_code == 200  # the form again, with errors
    assert client.post("/login/", WRONG).status_code == 429
    # Locked: the right password does not get in either, from another address too.
    locked = Client(REMOTE_ADDR="10.0.0.9").post("/login/", RIGHT)
    assert locked.status_code == 429
    assert "_auth_user_id" not in locked.client.session


def test_login_page_locks_an_address_out_across_usernames(researcher):
    client = Client(REMOTE_ADDR="10.0.0.7")
    for n in range(LIMIT):
        client.post("/login/", {"username": f"guess{n}", "password": "x"})
    assert client.post("/login/", RIGHT).status_code == 429
    assert Client(REMOTE_ADDR="10.0.0.8").post("/login/", RIGHT).status_code == 302


def test_token_endpoint_counts_and_is_locked_out_too(researcher):
    api = factories.client_for(None)
    for _ in range(LIMIT):
        assert api.post("/api/token/", WRONG).status_code in {400, 429}
    response = api.post("/api/token/", RIGHT)
    assert response.status_code == 429, response.content
    assert "token" not in response.json()
    # And the login page sees the same lockout.
    assert Client().post("/login/", RIGHT).status_code == 429


def test_a_success_below_the_limit_resets_the_count(researcher):
    client = Client()
    for _ in range(LIMIT - 1):
        client.post("/login/", WRONG)
    assert client.post("/login/", RIGHT).status_code == 302
    for _ in range(LIMIT - 1):
        assert Client().post("/login/", WRONG).status_code == 200


@pytest.fixture
def redis_url(tmp_path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        probe = redis.Redis(port=port)
        for _ in range(50):
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_with_redis_the_counts_are_shared_between_cache_clients(researcher, redis_url):
    """Failures counted by one process's cache client are seen by another's."""
    from axes.handlers.proxy import AxesProxyHandler

    caches = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache"}}
    first = {"default": {**caches["default"], "LOCATION": redis_url}}
    second = {"default": {**caches["default"], "LOCATION": redis_url, "OPTIONS": {"db": 0}}}
    handler = "axes.handlers.cache.AxesCacheHandler"
    with override_settings(CACHES=first, AXES_HANDLER=handler):
        AxesProxyHandler.implementation = None
        for _ in range(LIMIT - 1):
            Client().post("/login/", WRONG)
    # Another client, as another web process would have: one more failure locks out.
    with override_settings(CACHES=second, AXES_HANDLER=handler):
        AxesProxyHandler.implementation = None
        assert Client().post("/login/", WRONG).status_code == 429
        assert Client().post("/login/", RIGHT).status_code == 429
    AxesProxyHandler.implementation = None
    assert any(redis.Redis.from_url(redis_url).scan_iter("*axes*"))
