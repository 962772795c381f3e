"""Launching an agent harness (a coding-agent CLI, or any command) against the proxy.

A harness run (trajectories/services/harness_runs.py) calls `cli_launch` for the argv,
environment and config files of one headless run pointed at a recording session's proxy
URL, then `launch_run` to run it in its own folder with a timeout.

The environment is built from nothing, not copied from the worker's: the CLIs run shell
commands the model chose, so they must not see DATABASE_URL, SECRET_KEY or any API key
the worker holds. Only the variables in `_PASSED_THROUGH` carry over.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# `command`: any program, told where the proxy is by the OpenAI and Anthropic client
# variables (Polar's "any harness"). The others are the four CLIs of `make harnesses`.
CLI_KINDS = ("command", "claude", "codex", "qwen", "pi")
HARNESS_DIR = Path(__file__).resolve().parent.parent / "harnesses"
# What a run may inherit from the worker: where programs are, the locale, the time zone.
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ")
OUTPUT_TAIL_BYTES = 16 * 1024


class CliError(ValueError):
    """A harness that cannot be launched as asked (unknown kind, not installed)."""


@dataclass(frozen=True)
class CliLaunch:
    """One headless run: the argv, the child's whole environment, files to write first."""

    argv: list[str]
    env: dict[str, str]
    # Paths relative to the run's home folder → their content (the CLIs' settings files).
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int | None  # None when the run was killed at its timeout
    stdout_tail: str
    stderr_tail: str
    seconds: float
    timed_out: bool


def base_env(*, home: Path) -> dict[str, str]:
    """The scrubbed environment every run starts from."""
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        TMPDIR=str(home / "tmp"),
        NO_COLOR="1",
        CI="1",
    )
    return env


def cli_launch(
    kind: str,
    *,
    base_url: str,
    model: str,
    instruction: str,
    workdir: Path,
    home: Path,
    command: list[str] | None = None,
) -> CliLaunch:
    """How to run `kind` headless on `instruction` in `workdir`, against `base_url`.

    `base_url` is the session's proxy root, http://host:port/proxy/<key>, without /v1:
    Anthropic clients add /v1/messages themselves, OpenAI clients get base_url + "/v1".
    `command` is the argv for kind "command"; the instruction is its last argument.
    """
    if kind not in CLI_KINDS:
        raise CliError(f"unknown harness {kind!r}; use one of {', '.join(CLI_KINDS)}")
    env = base_env(home=home)
    env.update(_client_env(base_url=base_url, model=model))
    if kind == "command":
        if not command:
            raise CliError("a harness of kind 'command' needs its command line")
        return CliLaunch(argv=[*command, instruction], env=env)
    raise CliError(f"harness {kind!r} is not wired yet")


def _client_env(*, base_url: str, model: str) -> dict[str, str]:
    # The key is in the URL path; the API key variables only keep the clients from
    # refusing to start, and the proxy never forwards them.
    return {
        "OPENAI_BASE_URL": f"{base_url}/v1",
        "OPENAI_API_KEY": "recorded",
        "OPENAI_MODEL": model,
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "recorded",
        "ANTHROPIC_MODEL": model,
    }


def run_user() -> pwd.struct_passwd | None:
    """The unprivileged account runs use when the worker is root (HARNESS_RUN_USER)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("HARNESS_RUN_USER", "nobody")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def launch_run(launch: CliLaunch, *, workdir: Path, home: Path, timeout_s: float) -> LaunchResult:
    """Run it with stdin closed, in its own process group, killed whole at the timeout."""
    for relative, content in launch.files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    user = run_user()
    if user is not None:
        for folder in (workdir, home):
            _chown_tree(folder, user.pw_uid, user.pw_gid)
    started = time.monotonic()
    process = subprocess.Popen(
        launch.argv,
        cwd=workdir,
        env=launch.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        extra_groups=[] if user else None,
    )
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    return LaunchResult(
        exit_code=None if timed_out else process.returncode,
        stdout_tail=_tail(stdout),
        stderr_tail=_tail(stderr),
        seconds=time.monotonic() - started,
        timed_out=timed_out,
    )


def _chown_tree(folder: Path, uid: int, gid: int) -> None:
    os.chown(folder, uid, gid)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _tail(data: bytes) -> str:
    return data[-OUTPUT_TAIL_BYTES:].decode(errors="replace")
