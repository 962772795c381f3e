"""`make run` stops cleanly on Ctrl-C: the real Makefile and scripts/dev-server run here
with a stand-in virtualenv (its python and celery only wait), and the whole process group
gets the SIGINT a terminal sends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.paths import ROOT

PYTHON_STANDIN = """#!/bin/bash
# harness_app.queues prints queue names; runserver waits like the real one; the rest succeed.
case "$*" in
  *harness_app.queues*) echo celery ;;
  *runserver*) echo "Quit the server with CONTROL-C."; exec sleep 60 ;;
esac
exit 0
"""


COPIED = ("Makefile", "pyproject.toml", "requirements/constraints.txt", "scripts/dev-server")


def _checkout(tmp_path: Path) -> Path:
    for name in COPIED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool, text in (("python", PYTHON_STANDIN), ("celery", "#!/bin/sh\nexec sleep 60\n")):
        (bin_dir / tool).write_text(text)
        (bin_dir / tool).chmod(0o755)
    later = time.time() + 10  # the install stamp is newer than what it depends on
    (tmp_path / ".venv" / ".installed").touch()
    os.utime(tmp_path / ".venv" / ".installed", (later, later))
    return tmp_path


def test_ctrl_c_stops_make_run_without_an_error(tmp_path):
    checkout = _checkout(tmp_path)
    proc = subprocess.Popen(
        ["make", "run", "PORT=8999"],
        cwd=checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Quit the server" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stdout.read()
    proc.wait(timeout=30)
    assert "Stopped the web server and the workers." in rest
    assert "make: ***" not in rest, rest
