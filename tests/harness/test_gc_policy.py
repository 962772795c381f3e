"""A worker runs the harness with the collector tuned (harness_app/harness/gc_policy.py):
what it loaded is frozen at start, and each task's survivors are frozen after it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery.signals import task_postrun, worker_init, worker_process_init

import trajectories.tasks  # noqa: F401  (connects the worker's signal handlers)
from harness_app.harness import gc_policy


class _EagerTask:
    request = SimpleNamespace(is_eager=True)  # Celery's Django fix-up reads it after a task


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.parametrize("signal", [worker_init, worker_process_init])
def test_a_worker_freezes_what_it_loaded_and_raises_the_thresholds(restored_gc, signal) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    signal.send(sender=None)
    assert gc.get_threshold() == gc_policy.THRESHOLDS
    assert gc.get_freeze_count() > 1000


def test_what_a_task_leaves_is_collected_and_its_survivors_frozen(restored_gc) -> None:
    worker_process_init.send(sender=None)
    frozen = gc.get_freeze_count()
    cache = [[i] for i in range(5000)]  # a cache filled during the task
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle  # garbage only a collection finds
    task_postrun.send(sender=_EagerTask)
    assert gc.get_freeze_count() >= frozen + 5000
    assert gc.get_count()[0] < 100
    assert cache[-1] == [4999]
