"""A worker runs the harness with the collector tuned (harness_app/harness/gc_policy.py):
what it loaded is frozen at start, and each task's survivors are frozen after it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery.signals import task_postrun, task_prerun, worker_init, worker_process_init

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


def test_a_task_ending_while_others_run_freezes_nothing_of_theirs(restored_gc) -> None:
    """A thread-pool worker: freezing when one episode ends would make the others' objects
    permanent, and their garbage cycles would never be collected after they end."""
    worker_process_init.send(sender=None)
    task_prerun.send(sender=_EagerTask)  # episode A
    task_prerun.send(sender=_EagerTask)  # episode B, on another thread
    frozen = gc.get_freeze_count()
    b_state: list[object] = [[i] for i in range(5000)]  # B's live objects, in a cycle
    b_state.append(b_state)
    task_postrun.send(sender=_EagerTask)  # A ends while B runs
    assert gc.get_freeze_count() < frozen + 1000  # B's objects are not frozen
    found_b = weakref_to(b_state)
    del b_state  # B ends: its state is now a garbage cycle
    task_postrun.send(sender=_EagerTask)  # the process is idle again: collect, freeze
    assert found_b() is None  # collected, not kept forever
    assert gc.get_freeze_count() >= frozen


def test_a_busy_worker_still_collects_the_cycles_of_ended_episodes(restored_gc) -> None:
    """Cycles that lived long enough to reach the oldest generation need a full collection:
    a busy worker makes one every BUSY_FULL_EVERY task ends."""
    worker_process_init.send(sender=None)
    task_prerun.send(sender=_EagerTask)  # a long episode that never ends in this test
    states = []
    for _ in range(gc_policy.BUSY_FULL_EVERY):
        task_prerun.send(sender=_EagerTask)
        state: list[object] = [[i] for i in range(100)]
        state.append(state)
        states.append(state)
    gc.collect(1)  # the episodes' objects survive into the oldest generation
    ended = [weakref_to(state) for state in states]
    del state, states
    for _ in ended:
        task_postrun.send(sender=_EagerTask)  # each ends while the long one runs
    assert all(ref() is None for ref in ended)
    task_postrun.send(sender=_EagerTask)


class _Ref(list):  # lists cannot be weakly referenced; a subclass can
    pass


def weakref_to(obj: list[object]) -> weakref.ref[list[object]]:
    """A weak reference that dies with `obj`: a marker object inside its cycle."""
    marker = _Ref()
    obj.append(marker)
    return weakref.ref(marker)


@pytest.mark.django_db
def test_a_task_leaves_no_query_log_behind(restored_gc, settings) -> None:
    """With DEBUG on, each connection logs its queries (token blobs and all); a worker
    clears the log after every task, as Django does after every request."""
    from django.db import connection

    from harness_app.models import Benchmark

    settings.DEBUG = True  # pytest-django turns it off; the worker's default is on
    # The set-up directly, not through worker_process_init: once any test has sent
    # worker_init, Celery's Django fix-up closes every database connection on that signal,
    # this test's included (it failed so when the suite ran in a shuffled order).
    gc_policy.gc_setup()
    task_prerun.send(sender=_EagerTask)
    list(Benchmark.objects.all())
    assert connection.queries
    task_postrun.send(sender=_EagerTask)
    assert connection.queries == []
