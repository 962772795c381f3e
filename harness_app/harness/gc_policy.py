"""The garbage collector's settings for a process that runs harness steps (a worker).

A harness step allocates thousands of small objects, so CPython's default thresholds
(700, 10, 10) run a young collection every few steps and, every hundred or so, a full one
over everything the process holds: modules, the corpus and the caches of decoded
analyses and compressed views, which fill as the worker shows documents. That full
collection, tens to hundreds of milliseconds, was the harness step's p99
(bench/bench_harness_step.py; docs/harness.md, "Performance").

So a worker freezes what it has loaded (`gc.freeze()`: the collector never looks at it
again), raises the thresholds so young collections are rarer and full ones are left to
the quiet moment between two tasks, and there collects what the task left and freezes
the survivors, the caches' new entries among them. Frozen objects are still freed by
reference counting when a cache drops them; only garbage cycles among them would stay,
so every FULL_COLLECT_EVERY tasks the frozen set is thawed and fully collected once.

Freezing is only safe when no other task of the process is under way. A thread-pool
worker (`--pool=threads`) runs several episodes at once: freezing when one ends would
make the others' live objects permanent, and when those episodes end, the cycles among
their objects (an episode's state, its prompts and token lists) would never be
collected. (This came up while finding why workers of the full-scale simulation,
bench/bench_scale_sim.py with 4 workers x 8 threads, grew to 6 GB until one was killed
for memory; most of that growth was the query log that trajectories/tasks.py now clears
after each task.) So the worker counts its tasks in flight
(`gc_task_started`): the task that leaves the process idle collects and freezes; a task
that ends while others run collects without freezing, a full collection every
BUSY_FULL_EVERY such ends (young generations otherwise), so the garbage of ended
episodes never waits longer than that.

Pure standard library, so the bench applies exactly what a worker does.
"""

from __future__ import annotations

import gc
import threading

# Young collections every 20,000 net allocations instead of 700, a middle one every 20 of
# those, a full one every 100 middle ones: 40 million allocations, more than a rollout
# task makes (the collection after each task starts the counts again), so only a long
# task, a training job, collects its cycles during its run.
THRESHOLDS = (20_000, 20, 100)
FULL_COLLECT_EVERY = 500
# With other tasks running, a full collection (not followed by a freeze) every this many
# task ends: at most this many ended episodes' garbage cycles wait for it.
BUSY_FULL_EVERY = 4

_tasks = 0
_busy_ends = 0
_in_flight = 0
_lock = threading.Lock()


def gc_setup() -> None:
    """At a worker's start, after its imports (and in each pool process): freeze what is
    loaded and set the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


def gc_task_started() -> None:
    """Before each task: count it in flight (see the module's docstring)."""
    global _in_flight
    with _lock:
        _in_flight += 1


def gc_between_tasks() -> None:
    """After each task. When it leaves the process idle: collect what it left, then freeze
    what survived, so no collection during the next task walks the caches again (about a
    young collection over the task's survivors; every FULL_COLLECT_EVERY tasks, a full one
    over everything). When other tasks are still running: collect without freezing."""
    global _tasks, _busy_ends, _in_flight
    with _lock:
        _in_flight = max(0, _in_flight - 1)
        idle = _in_flight == 0
        _tasks += 1
        thaw = _tasks % FULL_COLLECT_EVERY == 0
        if not idle:
            _busy_ends += 1
        busy_full = not idle and _busy_ends % BUSY_FULL_EVERY == 0
    if not idle:
        gc.collect(2 if busy_full else 1)
        return
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
