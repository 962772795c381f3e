"""Launching an agent harness (a coding-agent CLI, or any command) against the proxy.

A harness run (trajectories/services/harness_runs.py) calls `cli_launch` for the argv,
environment and config files of one headless run pointed at a recording session's proxy
URL, then `launch_run` to run it in its own folder with a timeout.

The environment is built from nothing, not copied from the worker's: the CLIs run shell
commands the model chose, so they must not see DATABASE_URL, SECRET_KEY or any API key
the worker holds. Only the variables in `_PASSED_THROUGH` carry over.
"""

from __future__ import annotations

import json
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
    binary = cli_binary(kind)
    return _LAUNCHERS[kind](
        binary, base_url=base_url, model=model, instruction=instruction, env=env
    )


def cli_binary(kind: str) -> str:
    """The installed CLI's entry point; CliError when `make harnesses` has not run."""
    binary = HARNESS_DIR / "node_modules" / ".bin" / _BINARIES[kind]
    if not binary.exists():
        raise CliError(f"the {kind} CLI is not installed ({binary}); run `make harnesses`")
    return str(binary)


def installed_clis() -> dict[str, str]:
    """Each installed CLI's version, from its package.json (kind → version)."""
    found = {}
    for kind, package in _PACKAGES.items():
        manifest = HARNESS_DIR / "node_modules" / package / "package.json"
        try:
            found[kind] = str(json.loads(manifest.read_text())["version"])
        except (OSError, ValueError, KeyError):
            continue
    return found


# --- the four CLIs -------------------------------------------------------------------------
# Each is told where the proxy is, runs one instruction headless and exits, and has every
# call home switched off: telemetry, update checks, error reports, plugins. There is no
# internet where they run, and a recorded run must not reach a vendor where there is.

_PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "qwen": "@qwen-code/qwen-code",
    "pi": "@mariozechner/pi-coding-agent",
}
_BINARIES = {"claude": "claude", "codex": "codex", "qwen": "qwen", "pi": "pi"}
MAX_AGENT_TURNS = 8  # a recorded run is a handful of calls, not an open-ended session


def _claude(
    binary: str, *, base_url: str, model: str, instruction: str, env: dict[str, str]
) -> CliLaunch:
    # Anthropic Messages API; the client adds /v1/messages to ANTHROPIC_BASE_URL. As root it
    # refuses --dangerously-skip-permissions, so the tools are allowed by name instead.
    env.update(
        ANTHROPIC_SMALL_FAST_MODEL=model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_BUG_COMMAND="1",
        CLAUDE_CODE_DISABLE_TERMINAL_TITLE="1",
        # A first call with a cold 15k-token prompt takes minutes on a CPU server; the run's
        # own timeout (launch_run) is the one that should end it.
        API_TIMEOUT_MS="3600000",
    )
    argv = [
        binary,
        "-p",
        instruction,
        "--model",
        model,
        "--max-turns",
        str(MAX_AGENT_TURNS),
        "--allowedTools",
        "Bash,Read,Edit,Write,Glob,Grep",
        "--output-format",
        "json",
    ]
    return CliLaunch(argv=argv, env=env)


def _codex(
    binary: str, *, base_url: str, model: str, instruction: str, env: dict[str, str]
) -> CliLaunch:
    # Responses API only (0.169 refuses wire_api = "chat"); a provider of our own, read
    # from $CODEX_HOME/config.toml. It waits on stdin unless stdin is closed (launch_run).
    env["CODEX_HOME"] = str(Path(env["HOME"]) / ".codex")
    config = "\n".join(
        [
            f"model = {json.dumps(model)}",
            'model_provider = "recorder"',
            "check_for_update_on_startup = false",
            'approval_policy = "never"',
            "",
            "[model_providers.recorder]",
            'name = "recording proxy"',
            f"base_url = {json.dumps(base_url + '/v1')}",
            'env_key = "OPENAI_API_KEY"',
            'wire_api = "responses"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "stream_idle_timeout_ms = 3600000",
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[feedback]",
            "enabled = false",
            "",
            "[otel]",
            'exporter = "none"',
            "",
            # Plugins and apps sync by `git ls-remote https://github.com/openai/plugins.git`
            # at start (seen under strace with 0.169.0) unless these features are off.
            "[features]",
            "plugins = false",
            "remote_plugin = false",
            "plugin_sharing = false",
            "apps = false",
            "tool_suggest = false",
            "in_app_updates = false",
            "unbounded_connection_retries = false",
            "",
        ]
    )
    argv = [
        binary,
        "exec",
        "--sandbox",
        "workspace-write",
        "--skip-git-repo-check",
        "--color",
        "never",
        "--model",
        model,
        instruction,
    ]
    return CliLaunch(argv=argv, env=env, files={".codex/config.toml": config})


def _qwen(
    binary: str, *, base_url: str, model: str, instruction: str, env: dict[str, str]
) -> CliLaunch:
    # Chat completions through the OpenAI variables; --yolo runs its tools without asking.
    settings = {
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "memory": {
            "enableManagedAutoMemory": False,
            "enableManagedAutoDream": False,
            "enableAutoSkill": False,
        },
        "security": {"auth": {"selectedType": "openai"}},
        # No retries (a retry samples again) and no client timeout: the run's own applies.
        "model": {
            "maxSessionTurns": MAX_AGENT_TURNS,
            "generationConfig": {"timeout": 0, "maxRetries": 0},
        },
    }
    env.update(QWEN_CODE_API_TIMEOUT_MS="0", QWEN_STREAM_IDLE_TIMEOUT_MS="0")
    argv = [binary, "--yolo", "--auth-type", "openai", "--model", model, "--prompt", instruction]
    return CliLaunch(
        argv=argv, env=env, files={".qwen/settings.json": json.dumps(settings, indent=2)}
    )


def _pi(
    binary: str, *, base_url: str, model: str, instruction: str, env: dict[str, str]
) -> CliLaunch:
    # A provider of our own in ~/.pi/agent/models.json speaking chat completions; the system
    # prompt goes as a system message (vLLM's chat templates know no developer role).
    env.update(PI_OFFLINE="1", PI_TELEMETRY="0")
    models = {
        "providers": {
            "recorder": {
                "baseUrl": base_url + "/v1",
                "api": "openai-completions",
                "apiKey": "recorded",
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": model}],
            }
        }
    }
    argv = [
        binary,
        "--print",
        "--offline",
        "--no-session",
        "--no-extensions",
        "--no-skills",
        "--no-prompt-templates",
        "--no-themes",
        "--provider",
        "recorder",
        "--model",
        model,
        instruction,
    ]
    return CliLaunch(
        argv=argv, env=env, files={".pi/agent/models.json": json.dumps(models, indent=2)}
    )


_LAUNCHERS = {"claude": _claude, "codex": _codex, "qwen": _qwen, "pi": _pi}


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
        # The run's own folder (mkdtemp makes it 0700) must be the run user's to enter.
        for parent in {workdir.parent, home.parent}:
            os.chown(parent, user.pw_uid, user.pw_gid)
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
