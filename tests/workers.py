"""A real Celery worker process for tests that exercise queued work end to end.

The worker runs the project's Celery app in a subprocess against the test database (the
SQLite test database is a file for this reason; on PostgreSQL the worker connects to
`test_<name>`) and the configured broker: Redis in CI, the filesystem transport locally.
Tests using it need `django_db(transaction=True)` so their rows are committed and visible.
The `live_worker` fixture (tests/conftest.py) gives a test one worker for its duration.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.paths import ROOT


class LiveWorker:
    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool children), as a crash would."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Shut the worker down warm, or kill it when that takes too long."""
        if self.process.poll() is not None:
            return
        # SIGTERM to the main process only: it shuts its pool down itself. Signalling the
        # whole group kills the pool children under it and the warm shutdown then hangs
        # until the timeout below.
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


def start_worker(
    tmp_path: Path,
    *,
    queues: str = "celery,index,rollouts,rollouts_llm,training",
    concurrency: int = 2,
    pool: str = "prefork",
    name: str = "worker",
    extra_env: dict[str, str] | None = None,
    app: str = "config",
) -> LiveWorker:
    env = dict(os.environ)
    test_db = connection.settings_dict["NAME"]
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = f"sqlite:///{test_db}"
    else:
        db = connection.settings_dict
        env["DATABASE_URL"] = (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{test_db}"
        )
    env["HARNESS_DATA_DIR"] = str(settings.DATA_DIR)
    env.update(extra_env or {})
    tmp_path.mkdir(parents=True, exist_ok=True)
    log_path = tmp_path / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "--loglevel=INFO",
            # An empty `queues` starts a plain worker, which serves CELERY_TASK_QUEUES.
            *([f"--queues={queues}"] if queues else []),
            f"--concurrency={concurrency}",
            f"--pool={pool}",
            f"--hostname={name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = LiveWorker(process, log_path)
    deadline = time.monotonic() + 60
    while "ready." not in worker.log():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Celery worker did not start:\n{worker.log()[-4000:]}")
        time.sleep(0.2)
    return worker


def wait_until(predicate, *, timeout: float = 60, interval: float = 0.2, what: str = "condition"):
    """Poll `predicate` until it returns truthy; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")
