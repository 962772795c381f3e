"""A harness group launched as a user would, run by a real Celery worker (rollouts_llm,
threads) against the proxy at the live server: queued, recorded, evaluated, finished."""

from __future__ import annotations

import json
import sys

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.trajectories.test_harness_tasks import AGENT
from tests.workers import start_worker, wait_until
from trajectories.models import HarnessGroupStatus, HarnessRunStatus, ModelCall
from trajectories.services import harness_runs

pytestmark = pytest.mark.django_db(transaction=True)

# The runs may interleave their calls: the reward is the number of the run's last reply.
EVAL = 'echo "reward: $(tr -dc 0-9 < answer.txt)"'


def test_a_worker_runs_a_group_end_to_end_with_a_scrubbed_environment(
    live_server, settings, tmp_path
):
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        worker = start_worker(
            tmp_path,
            queues="rollouts_llm",
            pool="threads",
            extra_env={
                "PROXY_PUBLIC_URL": live_server.url,
                "SECRET_KEY": "the-workers-secret",
                # No such account: the run stays this user, who can read the venv's python.
                "HARNESS_RUN_USER": "no-such-user-for-tests",
            },
        )
        try:
            task = harness_runs.harness_task_create(
                name="answer",
                instruction="Write the answer",
                files={"agent.py": AGENT},
                eval_command=EVAL,
                timeout_s=60,
                eval_timeout_s=30,
            )
            group = harness_runs.harness_group_launch(
                task=task,
                kind="command",
                command=[sys.executable, "agent.py"],
                model="fake-model",
                size=2,
            )

            def finished():
                group.refresh_from_db()
                return group.status == HarnessGroupStatus.FINISHED

            wait_until(finished, timeout=120, what=f"group {group.pk}\n{worker.log()[-3000:]}")
        finally:
            worker.stop()

    runs = list(group.runs.select_related("session").order_by("index"))
    assert [r.status for r in runs] == [HarnessRunStatus.SUCCEEDED] * 2, [r.error for r in runs]
    assert ModelCall.objects.filter(episode__recording__task=group.task_key).count() == 4
    for run in runs:
        last = ModelCall.objects.filter(episode=run.session.episode_id).order_by("turn_index")
        reply = last.last().response["choices"][0]["message"]["content"]  # type: ignore[union-attr]
        assert run.reward == float(reply.removeprefix("reply "))
        env = json.loads(run.stdout.strip().splitlines()[-1])["env"]
        assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
        assert run.session.closed_at is not None
