"""`make test` runs the suite in several pytest-xdist processes: each must get its own data
folder and Redis broker database, and the processes a test starts must inherit them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import xdist_worker_isolate
from tests.paths import ROOT


def test_each_worker_gets_its_own_folder_and_broker_database():
    first = {
        "PYTEST_XDIST_WORKER": "gw0",
        "HARNESS_DATA_DIR": "/data",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
    }
    second = {**first, "PYTEST_XDIST_WORKER": "gw3"}
    assert xdist_worker_isolate(first) == "gw0"
    assert xdist_worker_isolate(second) == "gw3"
    assert (first["HARNESS_DATA_DIR"], first["CELERY_BROKER_URL"]) == (
        "/data/gw0",
        "redis://127.0.0.1:6379/15",
    )
    assert (second["HARNESS_DATA_DIR"], second["CELERY_BROKER_URL"]) == (
        "/data/gw3",
        "redis://127.0.0.1:6379/12",
    )


def test_a_child_process_inherits_the_rewrite_without_applying_it_twice():
    environ = {"PYTEST_XDIST_WORKER": "gw1", "HARNESS_DATA_DIR": "/data"}
    xdist_worker_isolate(environ)
    child = dict(environ)  # what a Celery worker started by a test is given
    xdist_worker_isolate(child)
    assert child["HARNESS_DATA_DIR"] == "/data/gw1"


def test_outside_xdist_nothing_changes():
    environ = {"HARNESS_DATA_DIR": "/data", "CELERY_BROKER_URL": "redis://h:6379/15"}
    assert xdist_worker_isolate(environ) == ""
    assert environ == {"HARNESS_DATA_DIR": "/data", "CELERY_BROKER_URL": "redis://h:6379/15"}


def test_a_broker_database_too_low_for_the_worker_count_is_refused_by_name():
    environ = {"PYTEST_XDIST_WORKER": "gw2", "CELERY_BROKER_URL": "redis://h:6379/1"}
    with pytest.raises(ImproperlyConfigured, match="database 1, too low for xdist worker gw2"):
        xdist_worker_isolate(environ)


PROBE = """
import os
from django.conf import settings

def test_where(worker_id):
    seen = f"{worker_id} {settings.DATA_DIR} {settings.CELERY_BROKER_URL}"
    with open(os.environ["PROBE_OUT"], "a") as out:  # xdist workers' prints are not shown
        out.write(seen + "\\n")
"""


@pytest.mark.skipif(
    not os.environ.get("CELERY_BROKER_URL", "").startswith("redis"),
    reason="needs a Redis CELERY_BROKER_URL (CI sets one)",
)
def test_two_real_xdist_workers_see_different_folders_and_brokers(tmp_path: Path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTEST_XDIST_WORKER", "HARNESS_TEST_WORKER", "PYTEST_CURRENT_TEST")
    }
    env.update(
        HARNESS_DATA_DIR=str(tmp_path / "data"),
        PROBE_OUT=str(tmp_path / "seen.txt"),
        CELERY_BROKER_URL="redis://127.0.0.1:6379/15",
    )
    result = subprocess.run(
        # --dist=each: the probe runs once in every worker
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist=each",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            str(probe),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = sorted(line.split() for line in (tmp_path / "seen.txt").read_text().splitlines())
    assert [worker for worker, *_ in lines] == ["gw0", "gw1"], result.stdout[-3000:]
    for worker, folder, broker in lines:
        assert folder == str(tmp_path / "data" / worker)
        assert broker == f"redis://127.0.0.1:6379/{15 - int(worker[2:])}"
