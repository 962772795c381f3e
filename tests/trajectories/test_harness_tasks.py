"""Harness tasks: a `command` harness run in-process against the recording proxy (served by
the live server, upstream the fake OpenAI server), evaluated, rewarded and cleaned up."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from training.rl.samples import rl_samples_for_recordings
from trajectories import agent_clis
from trajectories.models import (
    EpisodeStatus,
    HarnessGroupStatus,
    HarnessRun,
    HarnessRunStatus,
    ModelCall,
)
from trajectories.services import harness_runs
from trajectories.services.harness_runs import HarnessTaskError

# The agent: the real `openai` client, configured by the variables the harness launch sets,
# two calls, then an edit of the repository with the last reply. It prints what it could see.
AGENT = """
import json, os, sys
from openai import OpenAI

client = OpenAI(max_retries=0)
model = os.environ["OPENAI_MODEL"]
messages = [
    {"role": "system", "content": "You edit files."},
    {"role": "user", "content": sys.argv[-1]},
]
first = client.chat.completions.create(model=model, messages=messages)
messages += [
    {"role": "assistant", "content": first.choices[0].message.content},
    {"role": "user", "content": "and now?"},
]
second = client.chat.completions.create(model=model, messages=messages)
with open("answer.txt", "w") as f:
    f.write(second.choices[0].message.content)
print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}))
"""
# The fake upstream numbers its replies: the first run's second reply is "reply 2".
EVAL = 'grep -q "reply 2" answer.txt'


def task_of(**fields: Any) -> Any:
    values: dict[str, Any] = {
        "name": "answer task",
        "instruction": "Write the answer to answer.txt",
        "files": {"agent.py": AGENT, "README.md": "# a task\n"},
        "eval_command": EVAL,
        "timeout_s": 60,
        "eval_timeout_s": 30,
        **fields,
    }
    return harness_runs.harness_task_create(**values)


def group_of(task: Any, *, size: int = 1, command: list[str] | None = None, **fields: Any) -> Any:
    return harness_runs.harness_group_launch(
        task=task,
        kind="command",
        command=command or [sys.executable, "agent.py"],
        model="fake-model",
        size=size,
        enqueue=False,
        **fields,
    )


def seen_by_agent(run: HarnessRun) -> dict[str, Any]:
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture
def proxied(live_server, settings, monkeypatch):
    """The proxy at the live server, its upstream the fake server; runs as this user (the
    venv's python may sit where the unprivileged run user cannot read, e.g. /root)."""
    monkeypatch.setattr(agent_clis, "run_user", lambda: None)
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        settings.PROXY_PUBLIC_URL = live_server.url
        yield fake


# --- a run against the proxy ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_is_recorded_evaluated_rewarded_and_cleaned_up(proxied, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "worker-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://worker:pw@db/x")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-workers-own")
    group = group_of(task_of(), sampling={"temperature": 0.5})
    run = group.runs.get()

    assert harness_runs.harness_run_execute(run_id=run.pk) == HarnessRunStatus.SUCCEEDED

    run.refresh_from_db()
    assert run.status == HarnessRunStatus.SUCCEEDED and run.exit_code == 0, run.stderr
    assert run.eval_exit_code == 0 and run.reward == 1.0
    assert run.seconds is not None and run.finished_at is not None
    calls = list(ModelCall.objects.filter(episode=run.session.episode).order_by("turn_index"))
    assert [c.response["choices"][0]["message"]["content"] for c in calls] == [
        "reply 1",
        "reply 2",
    ]
    assert all(c.prompt_token_ids and c.completion_token_ids for c in calls)
    assert proxied.requests[0]["body"]["messages"][1]["content"] == run.group.task.instruction
    session = run.session
    session.refresh_from_db()
    assert session.closed_at is not None and session.sampling["temperature"] == 0.5
    assert session.sampling["model_map"] == {"*": group.model}
    assert session.task == group.task_key
    assert session.episode.status == EpisodeStatus.COMPLETED and session.episode.reward == 1.0
    seen = seen_by_agent(run)
    # A scrubbed environment: none of the worker's secrets, only the proxy's variables.
    assert "SECRET_KEY" not in seen["env"] and "DATABASE_URL" not in seen["env"]
    assert seen["env"]["OPENAI_API_KEY"] == "recorded"
    assert seen["env"]["OPENAI_BASE_URL"].startswith(f"{proxied_url(seen)}/proxy/hrk_")
    assert not Path(seen["cwd"]).exists() and not Path(seen["cwd"]).parent.exists()
    group.refresh_from_db()
    assert group.status == HarnessGroupStatus.FINISHED and group.finished_at is not None


def proxied_url(seen: dict[str, Any]) -> str:
    return seen["env"]["OPENAI_BASE_URL"].split("/proxy/")[0]


@pytest.mark.django_db(transaction=True)
def test_a_group_is_one_grpo_group_with_the_evaluations_as_rewards(proxied):
    group = group_of(task_of(), size=2)
    for run in group.runs.order_by("index"):
        harness_runs.harness_run_execute(run_id=run.pk)

    rewards = list(group.runs.order_by("index").values_list("reward", flat=True))
    assert rewards == [1.0, 0.0]  # only the first run's reply is "reply 2"
    build = rl_samples_for_recordings(task=group.task_key)
    advantages = {s.episode_id: s.advantage for s in build.sequences}
    first, second = (r.session.episode_id for r in group.runs.order_by("index"))
    assert advantages == {first: 0.5, second: -0.5}
    assert len(build.kept_groups) == 1


@pytest.mark.django_db(transaction=True)
def test_a_reward_line_sets_the_reward_and_the_repository_is_committed(proxied):
    check = "git log --format=%an%x20%s; git status --porcelain; echo 'reward: 0.25'; exit 3"
    run = group_of(task_of(eval_command=check)).runs.get()
    harness_runs.harness_run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert run.eval_exit_code == 3 and run.reward == 0.25
    # One commit by the fixed author; the agent's answer is the only change since.
    assert "Harness workbench answer task" in run.eval_output
    assert "?? answer.txt" in run.eval_output


@pytest.mark.django_db(transaction=True)
def test_a_harness_past_its_timeout_is_killed_and_not_evaluated(proxied):
    task = task_of(timeout_s=1)
    sleeper = [
        sys.executable,
        "-c",
        "import os, time; print(os.getcwd(), flush=True); time.sleep(60)",
    ]
    run = group_of(task, command=sleeper).runs.get()

    assert harness_runs.harness_run_execute(run_id=run.pk) == HarnessRunStatus.TIMED_OUT

    run.refresh_from_db()
    assert run.exit_code is None and run.reward is None and run.eval_exit_code is None
    assert "timeout_s=1" in run.error and run.seconds < 30
    assert not Path(run.stdout.strip()).exists()
    run.session.refresh_from_db()
    assert run.session.closed_at is not None and run.session.episode.reward is None


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_past_its_timeout_scores_zero(proxied):
    run = group_of(task_of(eval_command="sleep 30", eval_timeout_s=1)).runs.get()
    harness_runs.harness_run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == HarnessRunStatus.SUCCEEDED and run.reward == 0.0
    assert run.eval_exit_code is None and "eval_timeout_s=1" in run.eval_output


@pytest.mark.django_db(transaction=True)
def test_a_run_that_cannot_start_is_an_error_and_its_session_is_closed(proxied):
    run = group_of(task_of(), command=["/no/such/harness"]).runs.get()

    assert harness_runs.harness_run_execute(run_id=run.pk) == HarnessRunStatus.ERROR

    run.refresh_from_db()
    assert "/no/such/harness" in run.error and run.reward is None
    run.session.refresh_from_db()
    assert run.session.closed_at is not None
    assert run.group.status == HarnessGroupStatus.FINISHED
    # A second delivery of the same task does nothing.
    assert harness_runs.harness_run_execute(run_id=run.pk) == "skipped"


@pytest.mark.django_db
def test_a_run_found_running_was_lost_with_its_worker():
    run = group_of(task_of()).runs.get()
    HarnessRun.objects.filter(pk=run.pk).update(status=HarnessRunStatus.RUNNING)

    assert harness_runs.harness_run_execute(run_id=run.pk) == HarnessRunStatus.ERROR

    run.refresh_from_db()
    assert run.error == "the worker running it was lost"
    assert run.session.closed_at is not None


@pytest.mark.django_db
def test_a_run_no_live_worker_holds_is_an_error_when_a_worker_starts():
    from harness_app import jobs, queues

    lost, held = group_of(task_of(), size=2).runs.order_by("pk")
    HarnessRun.objects.update(status=HarnessRunStatus.RUNNING)

    counts = jobs.recover(in_hand={(queues.HARNESS_RUN, (held.pk,))})
    assert counts["trajectories.HarnessRun"] == 1
    lost.refresh_from_db()
    held.refresh_from_db()
    assert lost.status == HarnessRunStatus.ERROR
    assert lost.error.startswith("worker_lost: ") and lost.session.closed_at is not None
    assert held.status == HarnessRunStatus.RUNNING


@pytest.mark.django_db
@pytest.mark.skipif(agent_clis.run_user() is None, reason="runs change user only under root")
def test_under_root_the_harness_and_the_evaluation_run_unprivileged(settings):
    settings.PROXY_PUBLIC_URL = "http://127.0.0.1:9"
    user = agent_clis.run_user()
    assert user is not None
    task = task_of(
        eval_command=f'test "$(cat who)" = {user.pw_uid} && test "$(id -u)" = {user.pw_uid}'
    )
    run = group_of(task, command=["/bin/sh", "-c", "id -u > who", "sh"]).runs.get()
    harness_runs.harness_run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == HarnessRunStatus.SUCCEEDED, run.stderr
    assert run.reward == 1.0, run.eval_output


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions: nothing to restore")
def test_a_folder_the_agent_locked_is_removed_all_the_same(tmp_path):
    locked = tmp_path / "run" / "repo" / "locked"
    locked.mkdir(parents=True)
    (locked / "file.txt").write_text("x")
    locked.chmod(0o000)
    (tmp_path / "run" / "repo").chmod(0o500)

    harness_runs.folder_remove(tmp_path / "run")

    assert not (tmp_path / "run").exists()


# --- rewards ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code", "stdout", "reward"),
    [
        (0, "ok\n", 1.0),
        (1, "3 failed\n", 0.0),
        (None, "", 0.0),
        (1, "tests\nreward: 0.75\n", 0.75),
        (0, "reward: -2\n", -2.0),
        (0, "reward: nan\n", 1.0),
        (1, "reward: lots\n", 0.0),
        (0, "reward: 0.5\nthen more\n", 1.0),
    ],
)
def test_eval_reward(exit_code, stdout, reward):
    assert harness_runs.eval_reward(exit_code=exit_code, stdout=stdout) == reward


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"/etc/passwd": "x"}, "relative"),
        ({"../up.txt": "x"}, "'..'"),
        ({"a/../../b": "x"}, "'..'"),
        ({".git/hooks/pre-commit": "x"}, "'.git'"),
        ({"a": "x", "a/b": "y"}, "both a file and a folder"),
        ({"big.bin": "x" * (harness_runs.MAX_FILE_BYTES + 1)}, "bytes, more than"),
        ({"ok.txt": 3}, "must be text"),
        (["a.txt"], "JSON object"),
    ],
)
def test_bad_repositories_are_refused_naming_the_file(files, message):
    with pytest.raises(HarnessTaskError, match=message) as raised:
        task_of(files=files)
    assert raised.value.field == "files"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": " "}, "name"),
        ({"instruction": ""}, "instruction"),
        ({"eval_command": ""}, "eval_command"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"eval_timeout_s": harness_runs.MAX_TIMEOUT_S + 1}, "eval_timeout_s"),
    ],
)
def test_bad_tasks_name_the_field(fields, field):
    with pytest.raises(HarnessTaskError) as raised:
        task_of(**fields)
    assert raised.value.field == field


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "emacs"}, "kind"),
        ({"kind": "command", "command": []}, "command"),
        ({"kind": "command", "command": ["ok", ""]}, "command"),
        ({"kind": "qwen", "command": ["x"]}, "command"),
        ({"model": " "}, "model"),
        ({"size": 0}, "size"),
        ({"size": harness_runs.MAX_GROUP_SIZE + 1}, "size"),
        ({"sampling": {"temprature": 1}}, "sampling.temprature"),
        ({"sampling": {"top_p": 2}}, "sampling.top_p"),
        ({"sampling": [1]}, "sampling"),
    ],
)
def test_bad_groups_name_the_field_and_write_nothing(fields, field):
    task = task_of()
    values = {"task": task, "kind": "command", "command": ["x"], "model": "m", "size": 2}
    with pytest.raises(HarnessTaskError) as raised:
        harness_runs.harness_group_launch(**{**values, **fields}, enqueue=False)
    assert raised.value.field == field
    assert not task.groups.exists()


@pytest.mark.django_db
def test_a_launch_makes_one_queued_run_and_open_session_per_sample():
    group = group_of(task_of(), size=3)
    runs = list(group.runs.select_related("session").order_by("index"))
    assert [r.index for r in runs] == [0, 1, 2]
    assert all(r.status == HarnessRunStatus.QUEUED for r in runs)
    assert {r.session.task for r in runs} == {group.task_key}
    assert all(r.session.closed_at is None for r in runs)


@pytest.mark.django_db
def test_an_unreachable_broker_fails_the_runs_with_the_reason(
    monkeypatch, django_capture_on_commit_callbacks
):
    from kombu.exceptions import OperationalError

    def down(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr("harness_app.queues.enqueue", down)
    with django_capture_on_commit_callbacks(execute=True):
        group = harness_runs.harness_group_launch(
            task=task_of(), kind="command", command=["x"], model="m", size=2
        )

    runs = list(group.runs.select_related("session"))
    assert {r.status for r in runs} == {HarnessRunStatus.ERROR}
    assert all("broker is unreachable: connection refused" in r.error for r in runs)
    assert all(r.session.closed_at is not None for r in runs)
    group.refresh_from_db()
    assert group.status == HarnessGroupStatus.FINISHED
