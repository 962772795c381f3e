"""The WSGI entry gunicorn serves (config/wsgi.py), over a real HTTP server: /proxy/ calls
skip the site's middleware, the rest of the site keeps it, and a streamed answer's headers
reach the agent before the model's first event. Also the proxy's memory of open sessions."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest
from django.utils import timezone

from config.wsgi import application
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import ModelCall, RecordingSession
from trajectories.services.recording import (
    SessionKeyError,
    recording_session_authenticate,
    recording_session_create,
    recording_session_revoke,
)

SYSTEM = {"role": "system", "content": "You are a careful agent."}


class _Threaded(WSGIServer):
    daemon_threads = True

    def process_request(self, request, client_address):  # one thread a connection
        threading.Thread(target=self._serve, args=(request, client_address), daemon=True).start()

    def _serve(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        finally:
            self.shutdown_request(request)


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(settings):
    """config.wsgi.application on a real socket, with a canned upstream behind the proxy."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    with FakeOpenAIServer(hold_stream_after=0) as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        server = make_server("127.0.0.1", 0, application, _Threaded, _Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}", fake
        finally:
            fake.release.set()
            server.shutdown()
            server.server_close()


@pytest.mark.django_db(transaction=True)
def test_proxy_calls_skip_the_site_middleware_and_the_site_keeps_it(served):
    base, fake = served
    fake.hold_stream_after = None
    session, key = recording_session_create(user=None, name="wsgi")
    answer = httpx.post(
        f"{base}/proxy/{key}/v1/chat/completions",
        json={"model": "m", "messages": [SYSTEM]},
        timeout=10,
    )
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "reply 1"
    assert ModelCall.objects.filter(episode=session.episode).count() == 1
    # No security headers, cookies or CSRF on the API...
    assert "x-frame-options" not in answer.headers and "set-cookie" not in answer.headers
    # ...while the site's pages still get them.
    login = httpx.get(f"{base}/login/", timeout=10)
    assert login.status_code == 200 and login.headers["x-frame-options"] == "DENY"


@pytest.mark.django_db(transaction=True)
def test_the_short_path_still_checks_the_host_and_answers_unknown_paths_as_an_api(served):
    base, _ = served
    _, key = recording_session_create(user=None, name="wsgi")
    foreign = httpx.get(f"{base}/proxy/{key}/v1/models", headers={"host": "evil.example"})
    assert foreign.status_code == 400
    missing = httpx.post(f"{base}/proxy/{key}/v1/completions", json={}, timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found"


@pytest.mark.django_db(transaction=True)
def test_a_streamed_answer_starts_before_the_models_first_event(served):
    base, fake = served
    session, key = recording_session_create(user=None, name="wsgi")
    body = {"model": "m", "messages": [SYSTEM], "stream": True}
    url = f"{base}/proxy/{key}/v1/chat/completions"
    with httpx.Client(timeout=10) as client, client.stream("POST", url, json=body) as r:
        # The upstream holds before its first event; the agent already has the answer's
        # status and headers (httpx returns from stream() once it has them).
        assert r.status_code == 200 and fake.holding.is_set()
        assert r.headers["content-type"].startswith("text/event-stream")
        fake.release.set()
        text = b"".join(r.iter_raw()).decode()
    assert not fake.hold_expired
    assert text.rstrip().endswith("data: [DONE]")
    assert ModelCall.objects.get(episode=session.episode).completion_token_ids


# --- the memory of open sessions ------------------------------------------------------------


@pytest.mark.django_db
def test_a_session_revoked_here_is_refused_at_once(settings):
    settings.PROXY_AUTH_CACHE_S = 60.0
    session, key = recording_session_create(user=None)
    recording_session_authenticate(key=key)
    recording_session_revoke(session=session)
    with pytest.raises(SessionKeyError, match="revoked"):
        recording_session_authenticate(key=key)


@pytest.mark.django_db
def test_a_session_revoked_elsewhere_is_refused_once_the_memory_lapses(settings):
    # A plain UPDATE stands in for another process revoking the session.
    settings.PROXY_AUTH_CACHE_S = 0.2
    session, key = recording_session_create(user=None)
    recording_session_authenticate(key=key)
    RecordingSession.objects.filter(pk=session.pk).update(revoked_at=timezone.now())
    assert recording_session_authenticate(key=key).pk == session.pk  # still remembered
    time.sleep(0.25)
    with pytest.raises(SessionKeyError, match="revoked"):
        recording_session_authenticate(key=key)


@pytest.mark.django_db
def test_with_no_memory_every_call_looks_the_session_up(settings):
    settings.PROXY_AUTH_CACHE_S = 0
    session, key = recording_session_create(user=None)
    recording_session_authenticate(key=key)
    RecordingSession.objects.filter(pk=session.pk).update(closed_at=timezone.now())
    with pytest.raises(SessionKeyError, match="closed"):
        recording_session_authenticate(key=key)


@pytest.mark.django_db
def test_a_remembered_session_still_expires_on_time(settings):
    settings.PROXY_AUTH_CACHE_S = 60.0
    session, key = recording_session_create(user=None)
    RecordingSession.objects.filter(pk=session.pk).update(
        expires_at=timezone.now() + timedelta(seconds=0.2)
    )
    recording_session_authenticate(key=key)
    time.sleep(0.25)
    with pytest.raises(SessionKeyError, match="expired"):
        recording_session_authenticate(key=key)
