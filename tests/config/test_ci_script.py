""".ci/run stops the vLLM it started, and nothing else: its start-and-stop lines run here
with stand-in scripts while another "vLLM" of the same name runs beside them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.paths import ROOT

NAME = "vllm.entrypoints.openai.api_server"


def _start_and_stop_block() -> str:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("setsid "))
    end = next(i for i, line in enumerate(lines) if line.startswith("trap "))
    return "\n".join(lines[start : end + 1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return state != "Z"


def test_ci_stops_only_the_vllm_it_started(tmp_path):
    llm = tmp_path / "scripts" / "llm"
    llm.mkdir(parents=True)
    (llm / "setup.sh").write_text("#!/bin/sh\nexit 0\n")
    # The stand-in server and its engine child carry the real server's module name.
    (llm / "serve.sh").write_text(
        f"#!/bin/bash\nbash -c 'sleep 300; :' {NAME} &\necho $! > started.pid\n"
        f"exec bash -c 'sleep 301; :' {NAME}\n"
    )
    for script in llm.iterdir():
        script.chmod(0o755)
    (tmp_path / "var").mkdir()
    other = subprocess.Popen(["bash", "-c", "sleep 302; :", NAME])  # someone else's vLLM
    try:
        script = f"set -euo pipefail\nLLM_PORT=8999\n{_start_and_stop_block()}\n"
        script += "for _ in $(seq 50); do [ -s started.pid ] && break; sleep 0.1; done\n"
        subprocess.run(["bash", "-c", script], cwd=tmp_path, check=True, timeout=30)
        started = int((tmp_path / "started.pid").read_text())
        deadline = time.monotonic() + 5
        while _alive(started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(started), "the vLLM that .ci/run started outlived it"
        assert other.poll() is None, ".ci/run killed a vLLM it did not start"
    finally:
        other.kill()
        other.wait()
