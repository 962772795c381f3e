"""The job kernel: one lifecycle for every kind of background job.

A job is a row a worker carries out: an import, a rollout batch, an ablation matrix, a
harness run, an evaluation, an SFT export, an SFT or RL job. Each kind's model inherits
`Job` (its status with the kind's own choices, owner, created/started/finished, error,
attempt, progress) and its service drives the row through this module:

    enqueue   send the job's task once the transaction commits; when the broker is down,
              the row fails saying so (`NOT_QUEUED`), and `send_error` tells the caller
    claim     a worker takes the row: running, started now, one more attempt
    finish    the row reaches a final status; `finished` is sent
    fail      the row fails with a reason; `finished` is sent
    recover   at worker start, every kind's rows whose worker died (`lost`, `sweeps`)

`finished` (a django.dispatch.Signal, sender the model class, `job` the row) is sent inside
the transaction that finished the row, so a receiver's writes commit or roll back with it;
a receiver that sends tasks does so through `enqueue`, which waits for the commit. Owners
subscribe to it (an evaluation to its batches, say) instead of being called by them.

Nothing here runs work inline when the broker is down, and nothing here knows a kind: the
kinds register what recovery does with their rows (`lost`, `sweeps`) where they live.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any, ClassVar, TypeVar

from django.conf import settings
from django.db import models, transaction
from django.dispatch import Signal
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import queues

log = logging.getLogger(__name__)

# The reason a job whose task could not be sent fails with; `send_error` looks for it.
NOT_QUEUED = "not queued, the task broker is unreachable"
# The reason's prefix for a job whose worker died (the pages and tests look for it).
WORKER_LOST = "worker_lost"

# Sent when a job reaches a final status: sender = the model class, job = the row.
finished = Signal()

InHand = Collection[tuple[str, tuple[Any, ...]]]


class Job(models.Model):
    """The columns every job kind shares. A kind overrides `status` with its own choices
    (keeping its stored values) and names the statuses the kernel writes."""

    status = models.CharField(max_length=20, default="queued")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempt = models.PositiveIntegerField(default=0, help_text="times a worker claimed it")

    QUEUED: ClassVar[str] = "queued"
    RUNNING: ClassVar[str] = "running"
    DONE: ClassVar[str] = "done"
    FAILED: ClassVar[str] = "failed"
    FINISHED: ClassVar[tuple[str, ...]] = ("done", "failed")
    # The task that carries out one row (its one argument the row's id): recovery fails
    # a running row whose task no live worker holds. None: the kind has no such task.
    TASK: ClassVar[str | None] = None

    class Meta:
        abstract = True

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @classmethod
    def failure_fields(cls, reason: str) -> dict[str, str]:
        """The columns a failure's reason is written to (a kind that shows another)."""
        return {"error": reason}

    @property
    def progress(self) -> float:
        """How far along, 0 to 1; kinds that count their work say more."""
        return 1.0 if self.is_finished else 0.0


J = TypeVar("J", bound=Job)


# --- sending -------------------------------------------------------------------------------


def enqueue(
    job: Job,
    task: str,
    *args: int,
    queue: str | None = None,
    countdown: float | None = None,
    time_limit: float | None = None,
) -> None:
    """Send `task` (with `args`, the job's id by default) once the transaction commits, so
    a worker never looks for a row that is not committed. When the broker is unreachable
    the job fails with NOT_QUEUED and the reason; the work never runs inline instead."""
    sent = args or (job.pk,)
    send(
        job,
        lambda: queues.enqueue(
            task, *sent, queue=queue, countdown=countdown, time_limit=time_limit
        ),
    )


def send(job: Job, sender: Callable[[], object]) -> None:
    """Call `sender` (which sends the job's tasks) once the transaction commits; a broker
    that refuses fails the job as `enqueue` does. For a job sent as several tasks."""
    transaction.on_commit(lambda: send_now(job, sender))


def send_now(job: Job, sender: Callable[[], object]) -> bool:
    """Call `sender` now; False when the broker refused and the job failed saying so."""
    try:
        sender()
    except KombuOperationalError as exc:
        log.warning("could not queue %s %s: %s", job._meta.model_name, job.pk, exc)
        fail(job, f"{NOT_QUEUED}: {exc}")
        return False
    return True


def send_error(job: Job, *, reread: bool = True) -> str:
    """Why the job's task was not sent (the broker was down), or "" when it was: what a
    form, the API (503) and a command (`error:`) tell the caller after creating a job.
    The row is read again (the send happened on commit, after the caller loaded it)
    unless `reread` is off, for a row just loaded (a page showing it)."""
    status, error = job.status, job.error
    if reread:
        row = type(job)._default_manager.filter(pk=job.pk).values_list("status", "error").first()
        status, error = row if row else ("", "")
    return error if status == job.FAILED and error.startswith(NOT_QUEUED) else ""


# --- the worker's side ---------------------------------------------------------------------


@transaction.atomic
def claim(model: type[J], pk: int, **reset: Any) -> J | None:
    """Take the row for this worker (running, started now, one more attempt, the fields in
    `reset` set, as a redelivered run starts over); None when it is gone or finished."""
    job = model._default_manager.select_for_update().filter(pk=pk).first()
    if job is None or job.is_finished:
        return None
    job.status = model.RUNNING
    job.started_at = timezone.now()
    job.attempt += 1
    for name, value in reset.items():
        setattr(job, name, value)
    job.save(update_fields=["status", "started_at", "attempt", *reset])
    return job


@transaction.atomic
def finish(
    job: Job, status: str | None = None, *, running_only: bool = True, **fields: Any
) -> bool:
    """Give the job its final `status` (its kind's DONE by default) with `fields`, once:
    False when it had finished already, or, with `running_only`, was not running (a
    duplicate delivery that lost the race). Sends `finished`."""
    model = type(job)
    rows = model._default_manager.filter(pk=job.pk).exclude(status__in=model.FINISHED)
    if running_only:
        rows = rows.filter(status=model.RUNNING)
    values = {"status": status or model.DONE, "finished_at": timezone.now(), **fields}
    if not rows.update(**values):
        return False
    for name, value in values.items():
        setattr(job, name, value)
    finished.send(sender=model, job=job)
    return True


def fail(job: Job, reason: str, **fields: Any) -> bool:
    """Fail an unfinished job with `reason` (shown on its page); False when it had
    finished already. Sends `finished`."""
    model = type(job)
    return finish(job, model.FAILED, running_only=False, **model.failure_fields(reason), **fields)


# --- recovery ------------------------------------------------------------------------------

Lost = Callable[[Any], object]
Sweep = Callable[[Callable[[], InHand]], int]
_lost: dict[type[Job], Lost] = {}
_sweeps: dict[str, Sweep] = {}


def lost(model: type[J]) -> Callable[[Callable[[J], object]], Callable[[J], object]]:
    """Register what recovery does with a running `model` row whose task (`model.TASK`)
    no live worker holds; without one, the row fails with WORKER_LOST."""

    def register(handler: Callable[[J], object]) -> Callable[[J], object]:
        _lost[model] = handler
        return handler

    return register


def sweeps(name: str) -> Callable[[Sweep], Sweep]:
    """Register a recovery that is not one task per row (episodes by their heartbeat); it
    gets a function that answers the tasks in hand, and returns how many rows it
    recovered."""

    def register(sweep: Sweep) -> Sweep:
        _sweeps[name] = sweep
        return sweep

    return register


def lost_rows(model: type[J], in_hand: InHand) -> list[J]:
    """The running rows of `model` whose task no live worker holds."""
    running = model._default_manager.filter(status=model.RUNNING)
    return [job for job in running if (model.TASK, (job.pk,)) not in in_hand]


def recover(*, in_hand: InHand | Callable[[], InHand]) -> dict[str, int]:
    """Recover every kind's jobs whose worker died: what ONE worker start-up handler does
    (harness_app/tasks.py). `in_hand` is queues.tasks_in_hand's answer, or the function
    that asks it (asked once, and only if a kind needs it). A kind that fails is logged
    and the others still run. Returns how many rows each kind recovered."""
    asked: list[InHand] = []

    def hand() -> InHand:
        if not asked:
            asked.append(in_hand() if callable(in_hand) else in_hand)
        return asked[0]

    counts: dict[str, int] = {}
    for name, sweep in _sweeps.items():
        counts[name] = _guarded(name, lambda sweep=sweep: sweep(hand))  # type: ignore[misc]
    for model in _job_kinds():
        name = model._meta.label
        counts[name] = _guarded(name, lambda model=model: _recover_kind(model, hand()))  # type: ignore[misc]
    return counts


def _guarded(name: str, run: Callable[[], int]) -> int:
    try:
        return run()
    except Exception:  # a worker must start even if the database or broker is not there
        log.exception("could not recover the %s jobs of dead workers", name)
        return 0


def _recover_kind(model: type[Job], in_hand: InHand) -> int:
    handler = _lost.get(model)
    found = lost_rows(model, in_hand)
    for job in found:
        if handler is not None:
            handler(job)
        else:
            fail(job, f"{WORKER_LOST}: its worker died mid-run; run it again")
        log.warning("%s %s lost its worker", model._meta.verbose_name, job.pk)
    return len(found)


def _job_kinds() -> list[type[Job]]:
    from django.apps import apps

    return [
        m
        for m in apps.get_models()
        if issubclass(m, Job) and m.TASK is not None and not m._meta.abstract
    ]
