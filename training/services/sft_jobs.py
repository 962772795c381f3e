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
checkpoint the trainer saved (every save_steps), or from the start, and a worker that
starts while no live worker holds the task fails it, saying so (the job kernel's recovery,
harness_app/jobs.py). Each run claims the job (the kernel's `claim`: a new `attempt`
number) and writes only while it is the newest: a broker that redelivers a task still
running (Redis after its visibility timeout) makes the older run stop at its next step,
its outcome unwritten. The job is sent, finished and failed through the kernel, so a
broker that is down fails it with the reason, and a finished job sends `finished`.
"""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from harness_app import jobs, queues
from harness_app.models import PolicyConfig
from training.models import ExportStatus, JobStatus, SFTExport, SFTJob
from training.rl import publish
from training.services.jobs import (
    job_row_fields,
    policy_adapter_ensure_served,
    policy_adapter_serve,
    trainable_setup_check,
)
from training.services.policies import adapter_policy
from training.sft.settings import SFTJobError, SFTJobSettings, sft_settings_from

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
    row = job_row_fields(
        name=name, base_policy=base_policy, base_model_dir=base_model_dir, created_by=created_by
    )
    job = SFTJob.objects.create(export=export, **row, **job_settings.as_fields())
    job.output_dir = str(settings.DATA_DIR / "sft" / f"job-{job.pk}")
    job.save(update_fields=["output_dir"])
    if enqueue:
        jobs.enqueue(job, queues.SFT_JOB_RUN)
    return job


@transaction.atomic
def sft_job_cancel(*, job: SFTJob) -> bool:
    """A queued job is cancelled at once; a running one is asked to stop, and its trainer
    saves a checkpoint and returns (the job is then cancelled). False when finished."""
    locked = SFTJob.objects.select_for_update().get(pk=job.pk)
    if locked.is_finished:
        return False
    if locked.status == JobStatus.QUEUED:
        jobs.finish(locked, JobStatus.CANCELLED, running_only=False)
    else:
        SFTJob.objects.filter(pk=job.pk).update(cancel_requested=True)
    return True


@transaction.atomic
def sft_job_resume(*, job: SFTJob, enqueue: bool = True) -> SFTJob:
    """Queue a cancelled or failed job again; it goes on from its newest checkpoint."""
    locked = SFTJob.objects.select_for_update().get(pk=job.pk)
    if not locked.can_resume:
        raise SFTJobError(_why_not_resumable(locked))
    locked.status = JobStatus.QUEUED
    locked.cancel_requested = False
    locked.error = ""
    locked.finished_at = None
    locked.save(update_fields=["status", "cancel_requested", "error", "finished_at"])
    if enqueue:
        jobs.enqueue(locked, queues.SFT_JOB_RUN)
    return locked


def _why_not_resumable(job: SFTJob) -> str:
    if job.status == JobStatus.FAILED and job.adapter_path:
        return f"SFT job {job.pk} finished training: publish its adapter instead of resuming"
    stopped = job.status in (JobStatus.CANCELLED, JobStatus.FAILED)
    why = "has no checkpoint" if stopped else f"is {job.status}"
    return f"SFT job {job.pk} {why}: only a cancelled or failed job with a checkpoint resumes"


def _run_fail(job: SFTJob, error: str) -> None:
    """Fail the job while `job`'s run is the newest (a newer run owns it otherwise)."""
    if _this_run(job).exists():
        jobs.fail(job, error)
    log.warning("SFT job %s failed: %s", job.pk, error)


@jobs.lost(SFTJob)
def _sft_job_lost(job: SFTJob) -> None:
    """A running SFT job whose task no live worker holds lost its worker (recovered by
    jobs.recover at worker start): it fails, saying so; one with a checkpoint can be
    resumed (sft_job_resume)."""
    jobs.fail(job, f"{jobs.WORKER_LOST}: its worker died mid-training; resume it to go on")


# --- run -----------------------------------------------------------------------------------


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
    redelivered = SFTJob.objects.filter(pk=job_id, status=JobStatus.RUNNING).exists()
    job = jobs.claim(SFTJob, job_id)
    if job is None:
        return None
    # A resumed job goes on from its checkpoint; a redelivered one (running already: its
    # worker died, or the broker sent it twice) from the newest checkpoint its earlier run
    # saved, if any (the trainer starts afresh without one).
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
        _run_fail(job, str(exc))
    except DatabaseError:
        raise  # the database, not the job, is at fault
    except Exception as exc:
        # A crash would crash again on every retry: stop the job and say what happened.
        log.exception("SFT job %s: training failed", job.pk)
        progress.flush()
        _run_fail(job, f"{type(exc).__name__}: {exc}")
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
        if _this_run(job).exists():
            jobs.finish(job, JobStatus.CANCELLED, **outcome)
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
        if not jobs.finish(job, policy=policy, error=""):
            # A failed job's adapter published later (sft_job_publish) completes it now.
            SFTJob.objects.filter(pk=job.pk).update(
                status=JobStatus.COMPLETED, policy=policy, error="", finished_at=timezone.now()
            )


def sft_job_publish(*, job: SFTJob) -> bool:
    """Serve the job's trained adapter: again, for a completed job whose server forgot it
    (a restarted vLLM drops runtime adapters), or for the first time, completing a job
    whose publish failed. True when the adapter had to be loaded. Raises SFTJobError
    without an adapter, PublishError when the server refuses."""
    if job.status == JobStatus.COMPLETED and job.policy is not None:
        return sft_job_ensure_served(job=job)
    if job.status != JobStatus.FAILED or not job.adapter_path:
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
