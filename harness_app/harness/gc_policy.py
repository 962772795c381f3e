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

Pure standard library, so the bench applies exactly what a worker does.
"""

from __future__ import annotations

import gc

# Young collections every 20,000 net allocations instead of 700, a middle one every 20 of
# those, a full one every 100 middle ones: 40 million allocations, more than a rollout
# task makes (the collection after each task starts the counts again), so only a long
# task, a training job, collects its cycles during its run.
THRESHOLDS = (20_000, 20, 100)
FULL_COLLECT_EVERY = 500

_tasks = 0


def gc_setup() -> None:
    """At a worker's start, after its imports (and in each pool process): freeze what is
    loaded and set the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


def gc_between_tasks() -> None:
    """After each task: collect what it left, then freeze what survived, so no collection
    during the next task walks the caches again. Costs about a young collection over the
    task's survivors; every FULL_COLLECT_EVERY tasks, a full one over everything."""
    global _tasks
    _tasks += 1
    if _tasks % FULL_COLLECT_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
