"""Launching a harness: the scrubbed environment, the timeout, stdin, the config files, and
the argv, environment and settings of each of the four CLIs (trajectories/agent_clis.py)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import tomllib
from pathlib import Path

import pytest

from trajectories import agent_clis
from trajectories.agent_clis import CliError, CliLaunch, cli_launch, installed_clis, launch_run

BASE = "http://127.0.0.1:8000/proxy/k3y"
OFFLINE = {
    "claude": {
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "ANTHROPIC_SMALL_FAST_MODEL": "smollm2",
    },
    "pi": {"PI_OFFLINE": "1", "PI_TELEMETRY": "0"},
}


@pytest.fixture(autouse=True)
def as_caller(monkeypatch):
    # Under root launch_run changes to an unprivileged user, who cannot enter pytest's
    # root-only tmp folders; test_harness_tasks covers that switch.
    monkeypatch.setattr(agent_clis, "run_user", lambda: None)


@pytest.fixture
def fake_harnesses(tmp_path, monkeypatch) -> Path:
    """A harness folder whose four entry points exist, so argv tests need no npm."""
    folder = tmp_path / "harnesses"
    bin_dir = folder / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    for name in ("claude", "codex", "qwen", "pi"):
        (bin_dir / name).write_text("#!/bin/sh\n")
    monkeypatch.setattr(agent_clis, "HARNESS_DIR", folder)
    return folder


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    return work, home


def _launch(kind: str, tmp_path: Path, command: list[str] | None = None) -> CliLaunch:
    return cli_launch(
        kind,
        base_url=BASE,
        model="smollm2",
        instruction="add a line",
        workdir=tmp_path / "work",
        home=tmp_path / "home",
        command=command,
    )


def test_the_workers_secrets_never_reach_the_child(tmp_path, monkeypatch):
    for name in ("DATABASE_URL", "SECRET_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "leaked-" + name)
    work, home = _folders(tmp_path)
    dump = "import json, os, sys; print(json.dumps({**os.environ, 'ARGV': sys.argv[1:]}))"
    launch = _launch("command", tmp_path, command=[sys.executable, "-c", dump])
    result = launch_run(launch, workdir=work, home=home, timeout_s=30)
    assert result.exit_code == 0, result.stderr_tail
    seen = json.loads(result.stdout_tail)
    assert "leaked" not in result.stdout_tail
    assert "DATABASE_URL" not in seen and "SECRET_KEY" not in seen
    assert seen["OPENAI_API_KEY"] == "recorded"
    assert seen["OPENAI_BASE_URL"] == BASE + "/v1"
    assert seen["ANTHROPIC_BASE_URL"] == BASE
    assert seen["HOME"] == str(home)
    assert seen["ARGV"] == ["add a line"]
    assert set(seen) - {"ARGV"} <= set(launch.env) | {"PWD", "SHLVL", "_", "LC_CTYPE"}


def test_the_timeout_kills_the_whole_process_group(tmp_path):
    work, home = _folders(tmp_path)
    script = "sleep 60 & echo $! > grandchild.pid; sleep 60"
    launch = CliLaunch(argv=["sh", "-c", script], env=agent_clis.base_env(home=home))
    result = launch_run(launch, workdir=work, home=home, timeout_s=1)
    assert result.timed_out and result.exit_code is None
    assert result.seconds < 20
    grandchild = int((work / "grandchild.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), f"the grandchild {grandchild} outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_stdin_is_closed_and_the_files_are_written_under_home(tmp_path):
    work, home = _folders(tmp_path)
    read = "import sys; data = sys.stdin.read(); print(repr(data)); print(open(sys.argv[1]).read())"
    launch = CliLaunch(
        argv=[sys.executable, "-c", read, str(home / ".tool" / "settings.json")],
        env=agent_clis.base_env(home=home),
        files={".tool/settings.json": '{"telemetry": false}'},
    )
    result = launch_run(launch, workdir=work, home=home, timeout_s=30)
    assert result.exit_code == 0, result.stderr_tail
    assert result.stdout_tail.splitlines() == ["''", '{"telemetry": false}']
    assert (home / "tmp").is_dir()


def test_a_failing_command_reports_its_exit_code_and_output_tails(tmp_path):
    work, home = _folders(tmp_path)
    say = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = launch_run(
        _launch("command", tmp_path, command=[sys.executable, "-c", say]),
        workdir=work,
        home=home,
        timeout_s=30,
    )
    assert (result.exit_code, result.timed_out) == (3, False)
    assert result.stdout_tail.strip() == "out" and result.stderr_tail.strip() == "err"


def test_bad_kinds_and_missing_clis_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(CliError, match="unknown harness 'aider'"):
        _launch("aider", tmp_path)
    with pytest.raises(CliError, match="needs its command line"):
        _launch("command", tmp_path)
    monkeypatch.setattr(agent_clis, "HARNESS_DIR", tmp_path / "nowhere")
    with pytest.raises(CliError, match="run `make harnesses`"):
        _launch("claude", tmp_path)
    assert installed_clis() == {}


def test_claude_runs_print_mode_with_tools_allowed_and_offline(tmp_path, fake_harnesses):
    launch = _launch("claude", tmp_path)
    assert launch.argv[0] == str(fake_harnesses / "node_modules" / ".bin" / "claude")
    assert launch.argv[1:3] == ["-p", "add a line"]
    assert "--dangerously-skip-permissions" not in launch.argv
    assert launch.argv[launch.argv.index("--allowedTools") + 1].split(",")[0] == "Bash"
    assert launch.argv[launch.argv.index("--output-format") + 1] == "json"
    assert launch.env["ANTHROPIC_BASE_URL"] == BASE  # the client adds /v1/messages
    assert OFFLINE["claude"].items() <= launch.env.items()


def test_codex_runs_exec_on_its_own_responses_provider(tmp_path, fake_harnesses):
    launch = _launch("codex", tmp_path)
    assert launch.argv[1] == "exec" and launch.argv[-1] == "add a line"
    assert launch.argv[launch.argv.index("--sandbox") + 1] == "workspace-write"
    assert "--skip-git-repo-check" in launch.argv
    assert launch.env["CODEX_HOME"] == str(tmp_path / "home" / ".codex")
    config = tomllib.loads(launch.files[".codex/config.toml"])
    assert config["model_provider"] == "recorder"
    provider = config["model_providers"]["recorder"]
    assert provider["base_url"] == BASE + "/v1"
    assert provider["wire_api"] == "responses"
    assert provider["env_key"] == "OPENAI_API_KEY"
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"]["enabled"] is False
    assert config["feedback"]["enabled"] is False
    assert config["otel"]["exporter"] == "none"
    assert not any(config["features"][name] for name in ("plugins", "remote_plugin", "apps"))


def test_qwen_runs_yolo_on_chat_completions_with_statistics_off(tmp_path, fake_harnesses):
    launch = _launch("qwen", tmp_path)
    assert "--yolo" in launch.argv
    assert launch.argv[launch.argv.index("--prompt") + 1] == "add a line"
    assert launch.argv[launch.argv.index("--auth-type") + 1] == "openai"
    assert launch.env["OPENAI_BASE_URL"] == BASE + "/v1"
    settings = json.loads(launch.files[".qwen/settings.json"])
    assert settings["telemetry"]["enabled"] is False
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["memory"]["enableManagedAutoMemory"] is False


def test_pi_runs_print_mode_offline_on_a_chat_provider(tmp_path, fake_harnesses):
    launch = _launch("pi", tmp_path)
    assert {"--print", "--offline", "--no-session"} <= set(launch.argv)
    assert launch.argv[launch.argv.index("--provider") + 1] == "recorder"
    assert OFFLINE["pi"].items() <= launch.env.items()
    provider = json.loads(launch.files[".pi/agent/models.json"])["providers"]["recorder"]
    assert provider["baseUrl"] == BASE + "/v1"
    assert provider["api"] == "openai-completions"
    assert provider["models"] == [{"id": "smollm2"}]


@pytest.mark.parametrize("kind", ["claude", "codex", "qwen", "pi"])
def test_each_installed_cli_prints_its_version_in_the_scrubbed_environment(kind, tmp_path):
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the agent CLIs need Node 20 or later")
    version = installed_clis().get(kind)
    if version is None:
        pytest.skip(f"the {kind} CLI is not in {agent_clis.HARNESS_DIR}: run `make harnesses`")
    work, home = _folders(tmp_path)
    launch = _launch(kind, tmp_path)
    launch = CliLaunch(argv=[launch.argv[0], "--version"], env=launch.env, files=launch.files)
    result = launch_run(launch, workdir=work, home=home, timeout_s=120)
    assert result.exit_code == 0, result.stderr_tail
    assert version in result.stdout_tail + result.stderr_tail
    assert os.listdir(work) == []
