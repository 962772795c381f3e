"""Every write of an SFT job: create it, run it, cancel it, resume it, serve its adapter.

A job is created queued (`sft_job_create` checks the export, the base policy, the weights
and the settings) and run by one `sft_job_run_task` on the training queue. The run calls
the trainer (training/sft/train.py, imported only there, so the web process never loads
torch), which reports each logged step through a callback (written to the row at most
once a second) and polls the row's `cancel_requested` each step. A completed run's adapter
is loaded into the base policy's vLLM server as model `sft-job-<pk>`, and a policy of that
name, the base policy's settings with the adapter's model, is written for rollouts and RL
jobs (`RLJob.warm_start`) to use.

Cancelling a running job asks the trainer to stop: it saves a checkpoint and returns, and
the job is cancelled with that checkpoint, from which `sft_job_resume` goes on. A worker
that dies mid-run leaves the job running; the redelivered task resumes it from the newest
checkpoint the trainer saved (every save_steps), or from the start. Each run claims the
job with a new `attempt` number and writes only while it is the newest: a broker that
redelivers a task still running (Redis after its visibility timeout) makes the older run
stop at its next step, its outcome unwritten.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Collection
from pathlib import Path
from types import ModuleType
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import queues
from harness_app.models import PolicyConfig
from training.models import (
    SFT_JOB_FINISHED,
    ExportStatus,
    SFTExport,
    SFTJob,
    SFTJobStatus,
)
from training.rl import publish
from training.services.jobs import (
    policy_adapter_ensure_served,
    policy_adapter_serve,
    trainable_setup_check,
)
from training.services.policies import adapter_policy
from training.services.sft_job_settings import SFTJobError, SFTJobSettings, sft_settings_from

log = logging.getLogger(__name__)

TRAIN_PACKAGES = ("torch", "transformers", "peft", "trl")
PROGRESS_WRITE_S = 1.0  # at most one progress write a second (the last always lands)

__all__ = [
    "SFTJobError",
    "SFTJobSettings",
    "served_model_name",
    "sft_job_cancel",
    "sft_job_create",
    "sft_job_ensure_served",
    "sft_job_publish",
    "sft_job_resume",
    "sft_job_run",
    "sft_settings_from",
]


def trainer_module() -> ModuleType:
    """training.sft.train, imported on first use by the training worker only (it imports
    torch). Tests replace this function to run jobs without a model."""
    return importlib.import_module("training.sft.train")


def served_model_name(job: SFTJob) -> str:
    return f"sft-job-{job.pk}"


# --- create, cancel, resume ----------------------------------------------------------------


def _check_export(export: SFTExport) -> None:
    if export.status != ExportStatus.DONE:
        raise SFTJobError(
            f"export {export.pk} is {export.status}: train on a done export", field="export"
        )
    if export.records == 0 or not export.items.exists():
        raise SFTJobError(
            f"export {export.pk} holds no records: export approved episodes first",
            field="export",
        )


def _check_setup(base_policy: PolicyConfig, base_model_dir: str) -> None:
    trainable_setup_check(
        base_policy,
        base_model_dir,
        packages=TRAIN_PACKAGES,
        why_vllm="the adapter is served by an OpenAI-compatible (vLLM) policy's server",
        error=SFTJobError,
    )


@transaction.atomic
def sft_job_create(
    *,
    export: SFTExport,
    base_policy: PolicyConfig,
    base_model_dir: str,
    job_settings: SFTJobSettings,
    name: str = "",
    created_by: Any = None,
    enqueue: bool = True,
) -> SFTJob:
    """Check the request, write the job, and queue its run once committed."""
    _check_export(export)
    _check_setup(base_policy, base_model_dir)
    job_settings.check()
    job = SFTJob.objects.create(
        name=name,
        export=export,
        base_policy=base_policy,
        base_model_dir=str(Path(base_model_dir).resolve()),
        created_by=created_by if getattr(created_by, "pk", None) else None,
        **job_settings.as_fields(),
    )
    job.output_dir = str(settings.DATA_DIR / "sft" / f"job-{job.pk}")
    job.save(update_fields=["output_dir"])
    if enqueue:
        job_id = job.pk
        transaction.on_commit(lambda: sft_job_enqueue(job_id=job_id))
    return job


def sft_job_enqueue(*, job_id: int) -> None:
    try:
        queues.enqueue(queues.SFT_JOB_RUN, job_id)
    except KombuOperationalError as exc:
        # Never train inline when the broker is down: fail the job loudly instead.
        _job_fail(job_id, f"the task broker is unreachable: {exc}")


@transaction.atomic
def sft_job_cancel(*, job: SFTJob) -> bool:
    """A queued job is cancelled at once; a running one is asked to stop, and its trainer
    saves a checkpoint and returns (the job is then cancelled). False when finished."""
    locked = SFTJob.objects.select_for_update().get(pk=job.pk)
    if locked.is_finished:
        return False
    if locked.status == SFTJobStatus.QUEUED:
        SFTJob.objects.filter(pk=job.pk).update(
            status=SFTJobStatus.CANCELLED, finished_at=timezone.now()
        )
    else:
        SFTJob.objects.filter(pk=job.pk).update(cancel_requested=True)
    return True


@transaction.atomic
def sft_job_resume(*, job: SFTJob, enqueue: bool = True) -> SFTJob:
    """Queue a cancelled or failed job again; it goes on from its newest checkpoint."""
    locked = SFTJob.objects.select_for_update().get(pk=job.pk)
    if not locked.can_resume:
        raise SFTJobError(_why_not_resumable(locked))
    locked.status = SFTJobStatus.QUEUED
    locked.cancel_requested = False
    locked.error = ""
    locked.finished_at = None
    locked.save(update_fields=["status", "cancel_requested", "error", "finished_at"])
    if enqueue:
        job_id = locked.pk
        transaction.on_commit(lambda: sft_job_enqueue(job_id=job_id))
    return locked


def _why_not_resumable(job: SFTJob) -> str:
    if job.status == SFTJobStatus.FAILED and job.adapter_path:
        return f"SFT job {job.pk} finished training: publish its adapter instead of resuming"
    stopped = job.status in (SFTJobStatus.CANCELLED, SFTJobStatus.FAILED)
    why = "has no checkpoint" if stopped else f"is {job.status}"
    return f"SFT job {job.pk} {why}: only a cancelled or failed job with a checkpoint resumes"


def _job_fail(job_id: int, error: str, *, attempt: int | None = None) -> None:
    rows = SFTJob.objects.filter(pk=job_id).exclude(status__in=SFT_JOB_FINISHED)
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    rows.update(status=SFTJobStatus.FAILED, error=error, finished_at=timezone.now())
    log.warning("SFT job %s failed: %s", job_id, error)


def sft_jobs_recover(*, in_hand: Collection[tuple[str, tuple[object, ...]]]) -> int:
    """SFT jobs marked running whose task no live worker holds (`in_hand`, from
    queues.tasks_in_hand) lost their worker: each fails, saying so; one with a checkpoint
    can be resumed (sft_job_resume). Returns how many."""
    running = SFTJob.objects.filter(status=SFTJobStatus.RUNNING)
    lost = [job.pk for job in running if (queues.SFT_JOB_RUN, (job.pk,)) not in in_hand]
    for job_id in lost:
        _job_fail(job_id, "worker_lost: its worker died mid-training; resume it to go on")
    return len(lost)


# --- run -----------------------------------------------------------------------------------


@transaction.atomic
def _job_claim(job_id: int) -> tuple[SFTJob, bool] | None:
    """The job, now running, and whether it was running already (its task redelivered
    after its worker died); None when it is gone or finished."""
    job = SFTJob.objects.select_for_update().select_related("base_policy").filter(pk=job_id)
    claimed = job.first()
    if claimed is None or claimed.is_finished:
        return None
    redelivered = claimed.status == SFTJobStatus.RUNNING
    claimed.status = SFTJobStatus.RUNNING
    claimed.attempt += 1
    claimed.started_at = claimed.started_at or timezone.now()
    claimed.save(update_fields=["status", "attempt", "started_at"])
    return claimed, redelivered


def _this_run(job: SFTJob) -> QuerySet[SFTJob]:
    """The job's row while `job`'s run is the newest; no row once another run claimed it."""
    return SFTJob.objects.filter(pk=job.pk, attempt=job.attempt)


class _Progress:
    """The trainer's progress callback: merges each logged step into the job's history
    and writes step, total and history at most once every PROGRESS_WRITE_S."""

    def __init__(self, job: SFTJob) -> None:
        self.job = job
        self.history: list[dict[str, Any]] = list(job.history or [])
        self.step = job.step
        self.total_steps = job.total_steps
        self.written_at = 0.0

    def __call__(self, progress: Any) -> None:
        point = {
            "step": progress.step,
            "epoch": progress.epoch,
            "loss": progress.loss,
            "eval_loss": progress.eval_loss,
            "learning_rate": progress.learning_rate,
            "tokens_per_s": progress.tokens_per_s,
        }
        # A resumed run repeats the steps after its checkpoint: its points replace them.
        kept = [p for p in self.history if p["step"] <= point["step"]]
        if kept and kept[-1]["step"] == point["step"]:
            last = kept.pop()
            point = {k: v if v is not None else last.get(k) for k, v in point.items()}
        self.history = [*kept, point]
        self.step, self.total_steps = progress.step, progress.total_steps
        now = time.monotonic()
        if now - self.written_at >= PROGRESS_WRITE_S or self.step >= self.total_steps:
            self.flush()
            self.written_at = now

    def flush(self) -> None:
        _this_run(self.job).update(
            step=self.step, total_steps=self.total_steps, history=self.history
        )


def _should_stop(job: SFTJob) -> bool:
    """Stop when a cancel is asked for, or when another run has claimed the job."""
    return not _this_run(job).filter(cancel_requested=False).exists()


def episode_of_line(export: SFTExport) -> list[int]:
    """The episode id of each line of the export's file, so the eval split is by episode."""
    lines: list[int] = []
    rows = export.items.order_by("first_line").values_list("first_line", "records", "episode_id")
    for first_line, records, episode_id in rows:
        lines.extend([0] * (first_line - len(lines)))  # a gap would be a corrupt export
        lines.extend([episode_id] * records)
    return lines


def chat_template() -> str | None:
    """The chat template the student's vLLM serves, for records without recorded ids."""
    path = Path(settings.SFT_CHAT_TEMPLATE_PATH)
    return path.read_text() if path.is_file() else None


def sft_job_run(*, job_id: int) -> SFTJob | None:
    """The task's work: train, then publish the adapter and record the outcome."""
    claimed = _job_claim(job_id)
    if claimed is None:
        return None
    job, redelivered = claimed
    # A resumed job goes on from its checkpoint; a redelivered one from the newest
    # checkpoint its dead worker saved, if any (the trainer starts afresh without one).
    resume = redelivered or bool(job.checkpoint_path)
    trainer = trainer_module()
    refusals = (
        trainer.SFTSettingsError,
        trainer.SFTDataError,
        trainer.SFTModelError,
        trainer.SFTOutOfMemory,
        publish.PublishError,
    )
    progress = _Progress(job)
    try:
        _train_and_publish(job, trainer, progress, resume=resume)
    except refusals as exc:
        progress.flush()
        _job_fail(job.pk, str(exc), attempt=job.attempt)
    except DatabaseError:
        raise  # the database, not the job, is at fault
    except Exception as exc:
        # A crash would crash again on every retry: stop the job and say what happened.
        log.exception("SFT job %s: training failed", job.pk)
        progress.flush()
        _job_fail(job.pk, f"{type(exc).__name__}: {exc}", attempt=job.attempt)
    return SFTJob.objects.filter(pk=job_id).first()


def _train_and_publish(
    job: SFTJob, trainer: ModuleType, progress: _Progress, *, resume: bool
) -> None:
    trainer_settings = _job_settings(job).trainer_settings()
    trainer_settings.check()
    result = trainer.sft_train(
        model_dir=job.base_model_dir,
        export_path=job.export.file_path,
        output_dir=job.output_dir,
        settings=trainer_settings,
        episode_of_line=episode_of_line(job.export),
        chat_template=chat_template(),
        progress=progress,
        should_stop=lambda: _should_stop(job),
        resume=resume,
        device=settings.RL_TRAIN_DEVICE,
    )
    progress.flush()
    outcome: dict[str, Any] = {
        "metrics": result.metrics,
        "manifest": result.manifest,
        "checkpoint_path": str(result.checkpoint_dir or job.checkpoint_path),
    }
    if result.status != "completed":
        _this_run(job).update(status=SFTJobStatus.CANCELLED, finished_at=timezone.now(), **outcome)
        return
    # The trained adapter is recorded before it is published, so a refused publish (a
    # server whose --max-lora-rank is below the job's rank, say) loses no training:
    # sft_job_publish serves it once the server is fixed.
    if not _this_run(job).update(adapter_path=str(result.adapter_dir), **outcome):
        return  # a newer run owns the job and publishes its own adapter
    job.adapter_path = str(result.adapter_dir)
    try:
        _publish(job)
    except publish.PublishError as exc:
        raise publish.PublishError(
            f"{exc} (the adapter is saved in {job.adapter_path}; once the server can load "
            "it, publish it from the job's page or POST /api/sft-jobs/<id>/publish/)"
        ) from exc


def _job_settings(job: SFTJob) -> SFTJobSettings:
    fields = SFTJobSettings.__dataclass_fields__
    return SFTJobSettings(**{name: getattr(job, name) for name in fields})


def _publish(job: SFTJob) -> None:
    """Serve the adapter from the base policy's server, write its policy (the base
    policy's settings, the adapter's model name) and mark the job completed."""
    name = served_model_name(job)
    policy_adapter_serve(job.base_policy, name=name, path=Path(job.adapter_path))
    with transaction.atomic():
        policy = adapter_policy(job.base_policy, name=name, model=name)
        SFTJob.objects.filter(pk=job.pk).update(
            status=SFTJobStatus.COMPLETED, policy=policy, error="", finished_at=timezone.now()
        )


def sft_job_publish(*, job: SFTJob) -> bool:
    """Serve the job's trained adapter: again, for a completed job whose server forgot it
    (a restarted vLLM drops runtime adapters), or for the first time, completing a job
    whose publish failed. True when the adapter had to be loaded. Raises SFTJobError
    without an adapter, PublishError when the server refuses."""
    if job.status == SFTJobStatus.COMPLETED and job.policy is not None:
        return sft_job_ensure_served(job=job)
    if job.status != SFTJobStatus.FAILED or not job.adapter_path:
        raise SFTJobError(f"SFT job {job.pk} is {job.status} without a trained adapter to publish")
    _publish(job)
    return True


def sft_job_ensure_served(*, job: SFTJob) -> bool:
    """Load the job's adapter again if its server forgot it (a restarted vLLM drops
    runtime adapters); True when it had to be loaded. Raises PublishError."""
    if job.policy is None or not job.adapter_path:
        raise SFTJobError(f"SFT job {job.pk} has no published adapter")
    return policy_adapter_ensure_served(
        job.base_policy, name=job.policy.model, path=Path(job.adapter_path)
    )
