"""Harness tasks, groups and runs: every write (docs/proxy.md, "Harness tasks").

A task is a small repository (`files`), an instruction and an evaluation command. A group
runs one task N times with one harness (trajectories/agent_clis.py); each run owns a
recording session whose `task` key the group's runs share, so the group is one GRPO group
for `training.rl.samples.rl_samples_for_recordings`.

A run (`harness_run_execute`, the body of the Celery task) happens in a fresh temporary
folder holding the repository (written, `git init`, one commit) and a home folder for the
CLI's settings. The harness gets a scrubbed environment (agent_clis.base_env) and the
session's proxy URL, the evaluation command then runs in the repository with the same
scrubbed environment, and the folder is removed whatever happened. The session is closed
with the evaluation's reward, so the recorded episode completes with it.

A run killed at its timeout is not evaluated: its reward stays empty and the RL export
leaves it out (`no_reward`); its last call was cut off anyway.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import queues
from harness_app.wire.errors import ProtocolError
from harness_app.wire.sampling import sampling_overrides_parse
from trajectories import agent_clis
from trajectories.models import (
    HarnessGroup,
    HarnessGroupStatus,
    HarnessRun,
    HarnessRunStatus,
    HarnessTask,
)
from trajectories.models.harness_tasks import FINISHED_RUN
from trajectories.services import recording

log = logging.getLogger(__name__)

MAX_FILES = 500
MAX_FILE_BYTES = 512 * 1024
MAX_REPOSITORY_BYTES = 4 * 1024 * 1024
MAX_PATH_CHARS = 300
MAX_TIMEOUT_S = 4 * 3600
MAX_GROUP_SIZE = 64
# A fixed author, passed on the command line: the worker needs no git configuration.
GIT_IDENTITY = ("-c", "user.name=Harness workbench", "-c", "user.email=harness@workbench.invalid")
GIT_TIMEOUT_S = 60
REWARD_PREFIX = "reward:"


class HarnessTaskError(ValueError):
    """A task, group or run request that cannot be done; `field` names the bad input."""

    def __init__(self, message: str, field: str = "non_field_errors") -> None:
        super().__init__(message)
        self.field = field


# --- tasks ----------------------------------------------------------------------------------


def _check_path(path: Any) -> str:
    if not isinstance(path, str) or not path.strip():
        raise HarnessTaskError("every file path must be a non-empty string", "files")
    where = f"files[{path[:MAX_PATH_CHARS]!r}]"
    if len(path) > MAX_PATH_CHARS:
        raise HarnessTaskError(f"{where}: a path has at most {MAX_PATH_CHARS} characters", "files")
    if "\\" in path or "\0" in path:
        raise HarnessTaskError(f"{where}: use / between folders, no backslash or NUL", "files")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise HarnessTaskError(f"{where}: the path must be relative to the repository", "files")
    if any(part in ("..", ".git") for part in pure.parts) or path.endswith("/"):
        raise HarnessTaskError(
            f"{where}: no '..' or '.git' component, and name a file, not a folder", "files"
        )
    return str(pure)


def _check_files(files: Any) -> dict[str, str]:
    if not isinstance(files, dict):
        raise HarnessTaskError("files must be a JSON object {relative path: text}", "files")
    if len(files) > MAX_FILES:
        raise HarnessTaskError(f"files: at most {MAX_FILES} files, got {len(files)}", "files")
    checked: dict[str, str] = {}
    total = 0
    for path, text in files.items():
        name = _check_path(path)
        if not isinstance(text, str):
            raise HarnessTaskError(f"files[{name!r}]: the content must be text", "files")
        size = len(text.encode())
        if size > MAX_FILE_BYTES:
            raise HarnessTaskError(
                f"files[{name!r}]: {size} bytes, more than {MAX_FILE_BYTES}", "files"
            )
        total += size
        if name in checked:
            raise HarnessTaskError(f"files[{name!r}]: the same file named twice", "files")
        checked[name] = text
    if total > MAX_REPOSITORY_BYTES:
        raise HarnessTaskError(
            f"files: {total} bytes in all, more than {MAX_REPOSITORY_BYTES}", "files"
        )
    _check_no_file_is_a_folder(checked)
    return checked


def _check_no_file_is_a_folder(files: dict[str, str]) -> None:
    folders = {str(p) for name in files for p in PurePosixPath(name).parents}
    clash = sorted(folders & set(files))
    if clash:
        raise HarnessTaskError(f"files[{clash[0]!r}] is both a file and a folder", "files")


def _check_timeout(value: int, name: str) -> int:
    if not 1 <= value <= MAX_TIMEOUT_S:
        raise HarnessTaskError(f"{name} must be between 1 and {MAX_TIMEOUT_S} seconds", name)
    return value


@transaction.atomic
def harness_task_create(
    *,
    name: str,
    instruction: str,
    files: Any,
    eval_command: str,
    timeout_s: int = 600,
    eval_timeout_s: int = 120,
    created_by: Any = None,
) -> HarnessTask:
    """A new task; its repository is checked (relative paths, sizes) before it is saved."""
    if not name.strip():
        raise HarnessTaskError("name must not be blank", "name")
    if not instruction.strip():
        raise HarnessTaskError("instruction must not be blank", "instruction")
    if not eval_command.strip():
        raise HarnessTaskError("eval_command must not be blank", "eval_command")
    return HarnessTask.objects.create(
        name=name.strip(),
        instruction=instruction,
        files=_check_files(files),
        eval_command=eval_command,
        timeout_s=_check_timeout(timeout_s, "timeout_s"),
        eval_timeout_s=_check_timeout(eval_timeout_s, "eval_timeout_s"),
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )


# --- groups ---------------------------------------------------------------------------------


def _check_harness(kind: str, command: Any) -> list[str]:
    if kind not in agent_clis.CLI_KINDS:
        raise HarnessTaskError(
            f"kind {kind!r} is not a harness; use one of {', '.join(agent_clis.CLI_KINDS)}",
            "kind",
        )
    argv = list(command or [])
    if kind != "command":
        if argv:
            raise HarnessTaskError(f"command is only for kind 'command', not {kind!r}", "command")
        return []
    if not argv or not all(isinstance(a, str) and a for a in argv):
        raise HarnessTaskError(
            "kind 'command' needs command: a list of non-empty strings (the argv)", "command"
        )
    return argv


def _check_sampling(sampling: Any, *, model: str) -> dict[str, Any]:
    """The overrides as the proxy will apply them. Unless the group maps names itself,
    every model name the CLI asks for (its main and its small helper model) is served by
    the group's model."""
    try:
        overrides = sampling_overrides_parse(sampling)
    except ProtocolError as exc:
        raise HarnessTaskError(str(exc), exc.param or "sampling") from None
    checked = overrides.as_json()
    if not checked["model_map"]:
        checked["model_map"] = {"*": model}
    return checked


@transaction.atomic
def harness_group_launch(
    *,
    task: HarnessTask,
    kind: str,
    model: str,
    size: int,
    command: list[str] | None = None,
    sampling: dict[str, Any] | None = None,
    created_by: Any = None,
    enqueue: bool = True,
) -> HarnessGroup:
    """N queued runs of `task`, each with its recording session; sent to the workers once
    the transaction commits."""
    argv = _check_harness(kind, command)
    if not model.strip():
        raise HarnessTaskError("model must name the model the harness asks for", "model")
    if not 1 <= size <= MAX_GROUP_SIZE:
        raise HarnessTaskError(f"size must be between 1 and {MAX_GROUP_SIZE}", "size")
    user = created_by if getattr(created_by, "pk", None) else None
    group = HarnessGroup.objects.create(
        task=task,
        kind=kind,
        command=argv,
        model=model.strip(),
        sampling=_check_sampling(sampling, model=model.strip()),
        size=size,
        created_by=user,
    )
    for index in range(size):
        # The key made here is dropped: the run makes a fresh one when it starts.
        try:
            session, _ = recording.recording_session_create(
                user=user,
                name=f"{task.name} · group {group.pk} run {index}",
                task=group.task_key,
                metadata={"harness_group": group.pk, "harness_run_index": index},
                sampling=group.sampling,
            )
        except recording.RecordingError as exc:  # the sampling overrides' values
            raise HarnessTaskError(str(exc), exc.field) from exc
        HarnessRun.objects.create(group=group, index=index, session=session)
    if enqueue:
        group_id = group.pk
        transaction.on_commit(lambda: harness_group_enqueue(group_id=group_id))
    return group


def harness_group_enqueue(*, group_id: int) -> int:
    """Send one task per queued run of the group; how many were sent."""
    task = HarnessTask.objects.get(groups=group_id)
    ids = list(
        HarnessRun.objects.filter(group_id=group_id, status=HarnessRunStatus.QUEUED)
        .order_by("index")
        .values_list("pk", flat=True)
    )
    for run_id in ids:
        try:
            queues.enqueue(queues.HARNESS_RUN, run_id, time_limit=run_time_limit(task))
        except KombuOperationalError as exc:
            # Never run a harness inline when the broker is down: say so on the run.
            harness_run_fail(run_id=run_id, error=f"the task broker is unreachable: {exc}")
    return len(ids)


def run_time_limit(task: HarnessTask) -> float:
    """The Celery soft time limit of one run: its two timeouts, plus setup and slack."""
    return task.timeout_s + task.eval_timeout_s + 120.0


# --- runs -----------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """What a run left, saved in one write by `_run_finish`."""

    status: str
    exit_code: int | None = None
    reward: float | None = None
    eval_exit_code: int | None = None
    eval_output: str = ""
    stdout: str = ""
    stderr: str = ""
    seconds: float | None = None
    error: str = ""


@transaction.atomic
def _run_claim(run_id: int) -> tuple[HarnessRun | None, bool]:
    """Mark a queued run running: (the run, True). A run already running was claimed by
    an earlier delivery of its task whose worker was lost: (the run, False). None for a
    run that is gone or finished."""
    run = HarnessRun.objects.select_for_update().filter(pk=run_id).first()
    if run is None or run.is_finished:
        return None, False
    if run.status == HarnessRunStatus.RUNNING:
        return run, False
    run.status = HarnessRunStatus.RUNNING
    run.started_at = timezone.now()
    run.save(update_fields=["status", "started_at"])
    HarnessGroup.objects.filter(pk=run.group_id, status=HarnessGroupStatus.QUEUED).update(
        status=HarnessGroupStatus.RUNNING
    )
    return run, True


def harness_run_execute(*, run_id: int) -> str:
    """Run the harness on a fresh copy of the task's repository, evaluate, close the
    session with the reward. Returns the run's final status."""
    claimed, fresh = _run_claim(run_id)
    if claimed is None:
        return "skipped"
    if not fresh:
        return harness_run_fail(run_id=run_id, error="the worker running it was lost")
    run = HarnessRun.objects.select_related("group__task", "session").get(pk=run_id)
    try:
        key = recording.recording_session_rekey(
            session=run.session, ttl_s=_session_ttl(run.group.task)
        )
        outcome = _run_in_folder(run, key)
    except Exception as exc:
        log.exception("harness run %s failed", run.pk)
        reason = "".join(traceback.format_exception_only(exc)).strip()
        outcome = RunOutcome(status=HarnessRunStatus.ERROR, error=reason)
    _run_finish(run.pk, outcome)
    return outcome.status


def _session_ttl(task: HarnessTask) -> int:
    # The key must outlive the run; the proxy refuses an expired key mid-run.
    wanted = max(task.timeout_s + task.eval_timeout_s + 600, settings.PROXY_SESSION_TTL_S)
    return min(wanted, settings.PROXY_SESSION_MAX_TTL_S)


def proxy_base_url(key: str) -> str:
    """The session's proxy root as the harness sees it (agent_clis adds /v1 for OpenAI)."""
    return f"{settings.PROXY_PUBLIC_URL}/proxy/{key}"


def _run_in_folder(run: HarnessRun, key: str) -> RunOutcome:
    group, task = run.group, run.group.task
    root = Path(tempfile.mkdtemp(prefix=f"harness-run-{run.pk}-"))
    try:
        # Runs go as an unprivileged user when the worker is root: it must reach both.
        root.chmod(0o711)
        workdir, home = root / "repo", root / "home"
        repository_write(files=task.files, workdir=workdir, home=home, message=task.name)
        launch = agent_clis.cli_launch(
            group.kind,
            base_url=proxy_base_url(key),
            model=group.model,
            instruction=task.instruction,
            workdir=workdir,
            home=home,
            command=group.command or None,
        )
        result = agent_clis.launch_run(launch, workdir=workdir, home=home, timeout_s=task.timeout_s)
        outcome = RunOutcome(
            status=_launch_status(result),
            exit_code=result.exit_code,
            stdout=result.stdout_tail,
            stderr=result.stderr_tail,
            seconds=result.seconds,
        )
        if result.timed_out:
            outcome.error = f"the harness ran past timeout_s={task.timeout_s} and was killed"
            return outcome
        _evaluate(task, workdir=workdir, home=home, outcome=outcome)
        return outcome
    finally:
        folder_remove(root)


def folder_remove(root: Path) -> None:
    """Remove a run's folder, even where the agent took its own permissions away."""
    try:
        root.chmod(0o700)
        # Top-down: each folder is made writable and searchable before it is entered.
        for folder, dirs, _ in os.walk(root):
            for name in dirs:
                path = Path(folder) / name
                if not path.is_symlink():
                    path.chmod(0o700)
        shutil.rmtree(root)
    except OSError:
        log.exception("could not remove the harness run folder %s", root)


def _launch_status(result: agent_clis.LaunchResult) -> str:
    if result.timed_out:
        return HarnessRunStatus.TIMED_OUT
    return HarnessRunStatus.SUCCEEDED if result.exit_code == 0 else HarnessRunStatus.FAILED


def repository_write(*, files: dict[str, str], workdir: Path, home: Path, message: str) -> None:
    """The task's files in `workdir`, as one commit of a new git repository."""
    workdir.mkdir(parents=True)
    home.mkdir(parents=True)
    for name, text in files.items():
        path = workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {**agent_clis.base_env(home=home), "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ("init", "-q", "-b", "main"),
        ("add", "-A"),
        ("commit", "-q", "--allow-empty", "-m", message or "task"),
    ):
        done = subprocess.run(
            ["git", *GIT_IDENTITY, *args],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise HarnessTaskError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")


def _evaluate(task: HarnessTask, *, workdir: Path, home: Path, outcome: RunOutcome) -> None:
    """Run the evaluation command in the repository; its result is the reward."""
    launch = agent_clis.CliLaunch(
        argv=["/bin/sh", "-c", task.eval_command], env=agent_clis.base_env(home=home)
    )
    result = agent_clis.launch_run(
        launch, workdir=workdir, home=home, timeout_s=task.eval_timeout_s
    )
    output = result.stdout_tail + result.stderr_tail
    outcome.eval_exit_code = result.exit_code
    if result.timed_out:
        outcome.reward = 0.0
        output += f"\n[the evaluation ran past eval_timeout_s={task.eval_timeout_s}; reward 0]"
    else:
        outcome.reward = eval_reward(exit_code=result.exit_code, stdout=result.stdout_tail)
    outcome.eval_output = output[-agent_clis.OUTPUT_TAIL_BYTES :]


def eval_reward(*, exit_code: int | None, stdout: str) -> float:
    """`reward: <float>` on the last stdout line wins; else 1.0 for exit 0, 0.0 otherwise."""
    lines = stdout.strip().splitlines()
    last = lines[-1].strip() if lines else ""
    if last.lower().startswith(REWARD_PREFIX):
        try:
            value = float(last[len(REWARD_PREFIX) :].strip())
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return value
    return 1.0 if exit_code == 0 else 0.0


def _run_finish(run_id: int, outcome: RunOutcome) -> None:
    """Save the outcome, close the session with the reward, finish the group when done.

    The first outcome stays: a run already finished (marked lost by a redelivery of its
    task while it still ran, say) is not rewritten by the attempt that finishes later.
    """
    with transaction.atomic():
        run = HarnessRun.objects.select_for_update().select_related("session").get(pk=run_id)
        if run.is_finished:
            log.warning(
                "harness run %s already finished as %s; %s dropped",
                run_id,
                run.status,
                outcome.status,
            )
            return
        for name in (
            "status",
            "exit_code",
            "reward",
            "eval_exit_code",
            "eval_output",
            "stdout",
            "stderr",
            "seconds",
            "error",
        ):
            setattr(run, name, getattr(outcome, name))
        run.finished_at = timezone.now()
        run.save()
        if run.session.closed_at is None:
            recording.recording_session_close(
                session=run.session,
                reward=outcome.reward,
                metadata={"harness_run": run.pk, "harness_status": outcome.status},
            )
        _group_finish_if_done(run.group_id)


def _group_finish_if_done(group_id: int) -> None:
    unfinished = HarnessRun.objects.filter(group_id=group_id).filter(~Q(status__in=FINISHED_RUN))
    if not unfinished.exists():
        HarnessGroup.objects.filter(pk=group_id).exclude(status=HarnessGroupStatus.FINISHED).update(
            status=HarnessGroupStatus.FINISHED, finished_at=timezone.now()
        )


def harness_run_fail(*, run_id: int, error: str) -> str:
    """Mark an unfinished run as an error with `error`; its session closes unrewarded."""
    run = HarnessRun.objects.filter(pk=run_id).first()
    if run is None or run.is_finished:
        return "skipped"
    _run_finish(run_id, RunOutcome(status=HarnessRunStatus.ERROR, error=error))
    return HarnessRunStatus.ERROR


def harness_runs_recover(*, in_hand: Collection[tuple[str, tuple[object, ...]]]) -> int:
    """Runs marked running whose task no live worker holds (`in_hand`, from
    queues.tasks_in_hand) lost their worker: each is an error, saying so, its session
    closed, without waiting for the broker to redeliver the task. Returns how many."""
    running = HarnessRun.objects.filter(status=HarnessRunStatus.RUNNING)
    lost = [r.pk for r in running if (queues.HARNESS_RUN, (r.pk,)) not in in_hand]
    for run_id in lost:
        harness_run_fail(run_id=run_id, error="worker_lost: the worker running it died")
    return len(lost)
