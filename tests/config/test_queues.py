"""The queues are declared once (harness_app/queues.py), and the workers, the Docker
set-up and the docs serve and name exactly those."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from celery import current_app

from harness_app import queues

ROOT = Path(__file__).resolve().parents[2]


def test_every_declared_task_is_registered_under_its_name_in_the_web_process() -> None:
    # Services enqueue by name: a name that no process registers would never run.
    for task_name, queue in queues.TASK_QUEUES.items():
        assert task_name in current_app.tasks, task_name
        assert queue in queues.queue_names()


def test_the_two_compose_workers_together_serve_every_queue_once() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    served = [
        name
        for service in ("worker", "worker-llm")
        for name in compose["services"][service]["environment"]["CELERY_QUEUES"].split(",")
    ]
    assert sorted(served) == sorted(queues.queue_names())
    llm = compose["services"]["worker-llm"]["environment"]
    assert llm["CELERY_QUEUES"].split(",") == queues.queue_names("threads")
    assert llm["CELERY_POOL"] == "threads"


def test_the_architecture_doc_lists_the_declared_queues() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Queues", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    assert sorted(documented) == sorted(queues.queue_names())


def test_the_module_prints_each_pools_queues_for_the_worker_scripts() -> None:
    def printed(*args: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "harness_app.queues", *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        return out.strip().split(",")

    assert printed() == queues.queue_names()
    assert printed("--pool", "threads") == ["rollouts_llm"]
    assert "rollouts_llm" not in printed("--pool", "prefork")


def test_a_worker_started_without_queues_serves_every_declared_queue() -> None:
    # Celery's own default is the single queue "celery"; a plain `celery worker` would
    # then leave every rollout and index build waiting.
    consumed = current_app.amqp.queues.consume_from or current_app.amqp.queues
    assert sorted(consumed) == sorted(queues.queue_names())
    for task_name, queue in queues.TASK_QUEUES.items():
        route = current_app.amqp.router.route({}, task_name, (), {})
        assert route["queue"].name == queue
        assert queue in consumed
