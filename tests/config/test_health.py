"""/healthz reports the database and the broker, and answers 503 when one is down."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from tests.paths import ROOT


@pytest.mark.django_db
def test_healthz_is_public_and_reports_both_checks(client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is True


def _healthz_in_subprocess(tmp_path, **env: str) -> dict:
    code = (
        "import django, json, time; django.setup(); from django.test import Client; "
        "t = time.monotonic(); r = Client().get('/healthz'); s = time.monotonic() - t; "
        "print(json.dumps({'http': r.status_code, 'seconds': s, **r.json()}))"
    )
    full = dict(os.environ, HARNESS_DATA_DIR=str(tmp_path), HEALTH_CHECK_TIMEOUT_S="1", **env)
    full["DJANGO_SETTINGS_MODULE"] = "config.settings"
    full["ALLOWED_HOSTS"] = "testserver"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=full, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_healthz_is_503_when_the_broker_is_unreachable(tmp_path) -> None:
    body = _healthz_in_subprocess(tmp_path, CELERY_BROKER_URL="redis://127.0.0.1:9/0")
    assert body["http"] == 503
    assert body["status"] == "unavailable"
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True


def test_healthz_is_503_when_the_database_is_unreachable(tmp_path) -> None:
    body = _healthz_in_subprocess(tmp_path, DATABASE_URL="postgres://nobody@127.0.0.1:9/nothing")
    assert body["http"] == 503
    assert body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is False
    detail = body["checks"]["database"]["detail"]
    assert detail == "unreachable (OperationalError)"  # not the driver's text: no hosts
    assert "127.0.0.1" not in json.dumps(body)


def test_healthz_answers_within_5_s_when_servers_accept_and_never_reply(tmp_path) -> None:
    # A listener that accepts connections and never says a word, for both components.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    port = silent.getsockname()[1]
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        body = _healthz_in_subprocess(
            tmp_path,
            CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0",
            DATABASE_URL=f"postgres://nobody@127.0.0.1:{port}/nothing",
        )
    finally:
        silent.close()
        for conn in held:
            conn.close()
    assert body["http"] == 503
    assert body["checks"]["database"] == {"ok": False, "detail": "no answer within 1 s"}
    assert body["checks"]["broker"] == {"ok": False, "detail": "no answer within 1 s"}
    assert body["seconds"] < 5  # the request alone: a busy machine's start-up is not in it


@pytest.mark.django_db
def test_healthz_names_the_queues_no_worker_consumes(client, monkeypatch) -> None:
    from harness_app import queues

    monkeypatch.setattr(queues, "_consumed_queues", lambda timeout: frozenset({"celery"}))
    response = client.get("/healthz")
    assert response.status_code == 200  # the web process itself is fine
    body = response.json()
    assert body["queues_without_consumers"] == [
        "index",
        "rollouts",
        "rollouts_llm",
        "training",
    ]
    assert body["checks"]["workers"]["ok"] is False
    assert "rollouts_llm" in body["checks"]["workers"]["detail"]


@pytest.mark.django_db(transaction=True)
def test_a_plain_worker_consumes_every_queue(tmp_path, client) -> None:
    """`celery -A config worker` with no --queues serves every declared queue (the
    README's command), and /healthz, asking the live workers, says so."""
    from harness_app import queues
    from tests.workers import start_worker

    worker = start_worker(tmp_path, queues="", concurrency=1)
    try:
        queues.consumers_forget()
        assert queues.queues_without_consumers(timeout=2) == []
        body = client.get("/healthz").json()
        assert body["queues_without_consumers"] == []
        assert body["checks"]["workers"]["ok"] is True
    finally:
        worker.stop()
        queues.consumers_forget()
