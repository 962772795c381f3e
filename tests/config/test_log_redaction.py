"""Recording keys never reach the logs: Django's request lines and gunicorn's access log
both cut a key to its hint (config/logs.py)."""

from __future__ import annotations

import io
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from config.logs import RedactSessionKeys
from tests.paths import ROOT
from trajectories.services.recording import KEY_PREFIX, recording_session_create


def _redacting_handlers() -> list[logging.StreamHandler]:
    return [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, logging.StreamHandler)
        and any(isinstance(f, RedactSessionKeys) for f in h.filters)
    ]


@pytest.mark.django_db
def test_django_logs_a_proxy_path_with_the_key_cut_to_its_hint(client):
    _, key = recording_session_create(user=None, name="logs")
    assert key.startswith(KEY_PREFIX)
    (handler,) = _redacting_handlers()
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        # An unknown path under the key: Django logs "Not Found: <path>".
        assert client.post(f"/proxy/{key}/v1/nothing-here").status_code == 404
    finally:
        handler.setStream(previous)
    logged = stream.getvalue()
    assert f"/proxy/{key[:12]}…/v1/nothing-here" in logged
    assert key not in logged


def test_gunicorn_access_log_cuts_keys(tmp_path):
    key = KEY_PREFIX + "A" * 43
    log = tmp_path / "access.log"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "HARNESS_DATA_DIR": str(tmp_path), "DEBUG": "0"}
    env.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "config.wsgi:application",
            f"--bind=127.0.0.1:{port}",
            f"--access-logfile={log}",
            "--logger-class=config.logs.RedactingLogger",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/proxy/{key}/v1/models", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "no gunicorn"
                time.sleep(0.1)
        for _ in range(50):  # the line is written after the answer
            if log.exists() and "/proxy/" in log.read_text():
                break
            time.sleep(0.1)
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0].decode()
    written = log.read_text()
    assert f"/proxy/{key[:12]}…/v1/models" in written
    assert key not in written and key not in output
