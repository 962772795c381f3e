"""Every write of an RL job: create it, advance it one piece at a time, cancel it.

A job is driven by a single chain of `rl_job_advance_task` calls on the training queue.
Each call looks at where the job stands and does the next piece of work:

    no row for the current step  → create it and its rollout batch (sampled from the newest
                                   policy version; the rollout workers play it)
    the step's batch still runs  → come back in RL_POLL_S seconds (no worker is held)
    the step's batch is finished → build the batch (advantages, token-faithful sequences),
                                   take one trainer step, save the adapter, serve it through
                                   vLLM, record the new PolicyVersion and the step's metrics

In async mode (`mode="async"`) a finished batch first starts the next step's rollouts, on
the newest version (the one the finished step sampled, or the one it trained from), and
then trains: the rollout workers sample step n+1 while the trainer takes step n, and step
n+1 trains on episodes one version older than its trainer (staleness 1, in its metrics).

The trainer runs outside any transaction; the step's outcome is written in one. A worker
that dies mid-training leaves the step in `training`, and the redelivered task trains it
again from the saved previous version. Publishing replaces an adapter of the same name, so
a retried step serves the weights it saved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from harness_app import jobs, queues
from harness_app.harness.llm.reconstruct import strategy_clean
from harness_app.models import Benchmark, PolicyConfig, ToolCallFormat
from training.models import (
    JobStatus,
    PolicyVersion,
    RLJob,
    RLMode,
    RLStep,
    RLStepStatus,
    SFTJob,
    SFTJobStatus,
)
from training.rl import publish
from training.rl.advantages import AdvantageSettings
from training.rl.batches import BatchBuild
from training.rl.samples import rl_samples_for_batch
from training.rl.settings import (
    LORA_TARGETS_DEFAULT,
    MAX_GROUP_SIZE,
    MAX_LORA_RANK,
    MAX_STEPS,
    PRESETS,
    RLJobError,
    RLJobSettings,
    job_settings_from,
)
from training.rl.step_metrics import build_metrics, rollout_metrics
from training.services.jobs import (
    job_row_fields,
    policy_adapter_ensure_served,
    policy_adapter_serve,
    trainable_setup_check,
)
from training.services.policies import adapter_policy
from trajectories.models import BatchStatus, Episode
from trajectories.services import rollouts

log = logging.getLogger(__name__)

TRAIN_PACKAGES = ("torch", "transformers", "peft")

__all__ = [
    "LORA_TARGETS_DEFAULT",
    "MAX_GROUP_SIZE",
    "MAX_LORA_RANK",
    "MAX_STEPS",
    "PRESETS",
    "RLJobError",
    "RLJobSettings",
    "job_settings_from",
    "rl_job_advance",
    "rl_job_cancel",
    "rl_job_create",
    "rl_job_tick",
]


def _check_trainable_setup(base_policy: PolicyConfig, base_model_dir: str) -> None:
    trainable_setup_check(
        base_policy,
        base_model_dir,
        packages=TRAIN_PACKAGES,
        why_vllm="RL samples from an OpenAI-compatible (vLLM) policy, whose adapters it "
        "then serves",
        error=RLJobError,
    )


# --- create and cancel ---------------------------------------------------------------------


def _warm_start_setup(
    warm_start: SFTJob, job_settings: RLJobSettings
) -> tuple[PolicyConfig, str, RLJobSettings]:
    """A warm start samples from the SFT job's served adapter and trains on from it: its
    policy is the base policy, its weights the base weights, and its LoRA shape (rank,
    targets) replaces the one requested, which the loaded adapter fixes anyway."""
    if warm_start.status != SFTJobStatus.COMPLETED or warm_start.policy is None:
        raise RLJobError(
            f"warm_start: SFT job {warm_start.pk} is {warm_start.status} without a published "
            "adapter; start from a completed SFT job",
            field="warm_start",
        )
    if not Path(warm_start.adapter_path).is_dir():
        raise RLJobError(
            f"warm_start: SFT job {warm_start.pk}'s adapter is missing from "
            f"{warm_start.adapter_path!r}",
            field="warm_start",
        )
    shaped = replace(
        job_settings, lora_rank=warm_start.lora_rank, lora_targets=list(warm_start.lora_targets)
    )
    return warm_start.policy, warm_start.base_model_dir, shaped


@transaction.atomic
def rl_job_create(
    *,
    benchmark: Benchmark,
    base_policy: PolicyConfig | None,
    base_model_dir: str = "",
    job_settings: RLJobSettings,
    name: str = "",
    created_by: Any = None,
    enqueue: bool = True,
    warm_start: SFTJob | None = None,
) -> RLJob:
    """Check the request, write the job and its version 0 (the base policy, or a warm
    start's SFT adapter), and start the job's task chain once committed."""
    if warm_start is not None:
        base_policy, base_model_dir, job_settings = _warm_start_setup(warm_start, job_settings)
    if base_policy is None:
        raise RLJobError("give a base_policy, or a warm_start", field="base_policy")
    job_settings.check()
    job_settings = replace(job_settings, reconstruction=strategy_clean(job_settings.reconstruction))
    _check_trainable_setup(base_policy, base_model_dir)
    if not benchmark.queries.exists():
        raise RLJobError(
            f"benchmark {benchmark.name!r} has no queries to sample", field="benchmark"
        )
    row = job_row_fields(
        name=name, base_policy=base_policy, base_model_dir=base_model_dir, created_by=created_by
    )
    job = RLJob.objects.create(
        benchmark=benchmark, warm_start=warm_start, **row, **asdict(job_settings)
    )
    PolicyVersion.objects.create(
        job=job,
        number=0,
        policy=_version0_policy(job),
        adapter_path=warm_start.adapter_path if warm_start is not None else "",
    )
    if enqueue:
        jobs.enqueue(job, queues.RL_JOB_ADVANCE)
    return job


@transaction.atomic
def rl_job_cancel(*, job: RLJob) -> bool:
    """Stop the job after the piece of work in flight; its running batch is cancelled."""
    job = RLJob.objects.select_for_update().get(pk=job.pk)
    if job.is_finished:
        return False
    jobs.finish(job, JobStatus.CANCELLED, running_only=False)
    _batches_cancel(job.pk)
    return True


def _batches_cancel(job_id: int) -> None:
    """Cancel the job's rollouts still running: the current step's, and in async mode the
    next step's too."""
    steps = RLStep.objects.filter(job_id=job_id, status=RLStepStatus.ROLLOUT, batch__isnull=False)
    for step in steps.select_related("batch"):
        assert step.batch is not None
        rollouts.batch_cancel(batch=step.batch)


def _job_fail(job: RLJob, error: str, *, step: RLStep | None = None) -> None:
    with transaction.atomic():
        if step is not None:
            RLStep.objects.filter(pk=step.pk).update(
                status=RLStepStatus.FAILED, error=error, finished_at=timezone.now()
            )
        jobs.fail(job, error)
        _batches_cancel(job.pk)
    log.warning("RL job %s failed: %s", job.pk, error)


# --- advance -------------------------------------------------------------------------------


def rl_job_advance(*, job_id: int) -> float | None:
    """Do the job's next piece of work. Returns the seconds to wait before the next call,
    or None when the job is finished (or gone)."""
    job = RLJob.objects.select_related("benchmark", "base_policy").filter(pk=job_id).first()
    if job is None or job.is_finished:
        return None
    if job.status == JobStatus.QUEUED:
        jobs.claim(RLJob, job.pk)
    step = (
        job.step_rows.filter(index=job.steps_done)
        .select_related("batch", "version__policy")
        .first()
    )
    try:
        if step is None:
            _step_start(job, index=job.steps_done)
            return settings.RL_POLL_S
        if step.status == RLStepStatus.ROLLOUT and not _rollout_finished(job, step):
            return settings.RL_POLL_S
        return _step_train(job, step)
    except (RLJobError, publish.PublishError) as exc:
        _job_fail(job, str(exc), step=step)
        return None
    except DatabaseError:
        raise  # the task retries: the database, not the job, is at fault
    except Exception as exc:
        # A trainer crash (out of memory, a model the weights do not fit) would crash
        # again on every retry: stop the job and say what happened.
        log.exception("RL job %s: step failed", job.pk)
        _job_fail(job, f"{type(exc).__name__}: {exc}", step=step)
        return None


def rl_job_tick(*, job_id: int) -> str:
    """The job task's work: one piece of the job, then the next piece scheduled, so one
    chain of tasks drives the job and no worker sits waiting while the rollouts run."""
    wait = rl_job_advance(job_id=job_id)
    if wait is None:
        return "finished"
    job = RLJob.objects.get(pk=job_id)
    if not jobs.send_now(
        job, lambda: queues.enqueue(queues.RL_JOB_ADVANCE, job_id, countdown=wait)
    ):
        _batches_cancel(job_id)  # failed with the reason: the broker is down
        return "not queued"
    return f"next in {wait:.1f}s"


def step_query_ids(job: RLJob, index: int) -> list[int]:
    """The queries of step `index`: the next `queries_per_step` of the benchmark in id
    order, wrapping around, so successive steps cover the split before repeating it."""
    ids = list(job.benchmark.queries.order_by("pk").values_list("pk", flat=True))
    count = min(job.queries_per_step, len(ids))
    start = (index * count) % len(ids)
    return [ids[(start + i) % len(ids)] for i in range(count)]


def _newest_version(job: RLJob) -> PolicyVersion:
    return job.versions.select_related("policy").order_by("-number").first()  # type: ignore[return-value]


def _step_start(job: RLJob, *, index: int) -> RLStep:
    version = _newest_version(job)
    if version.adapter_path:
        # A restarted vLLM forgets runtime adapters: serve it again (on every replica)
        # before sampling.
        policy_adapter_ensure_served(
            job.base_policy, name=version.policy.model, path=Path(version.adapter_path)
        )
    with transaction.atomic():
        try:
            batch = rollouts.batch_create(
                benchmark=job.benchmark,
                policy=version.policy,
                created_by=job.created_by,
                samples_per_query=job.group_size,
                max_turns=job.max_turns,
                termination_policy=job.termination_policy,
                reward_weights=job.reward_weights,
                query_ids=step_query_ids(job, index),
            )
        except rollouts.BatchParameterError as exc:
            raise RLJobError(f"step {index}: {exc}") from exc
        return RLStep.objects.create(job=job, index=index, version=version, batch=batch)


def _next_rollouts_start(job: RLJob, step: RLStep) -> None:
    """Async mode: start step n+1's rollouts before step n trains (once: a retried step
    finds them started)."""
    following = step.index + 1
    if job.mode != RLMode.ASYNC or following >= job.steps:
        return
    if not job.step_rows.filter(index=following).exists():
        _step_start(job, index=following)


def _rollout_finished(job: RLJob, step: RLStep) -> bool:
    batch = step.batch
    if batch is None:
        raise RLJobError(f"step {step.index}'s rollout batch was deleted")
    if batch.status in (BatchStatus.QUEUED, BatchStatus.RUNNING):
        return False
    if batch.status == BatchStatus.CANCELLED:
        raise RLJobError(f"step {step.index}'s rollout batch {batch.pk} was cancelled")
    if batch.error:  # its episodes were never sent (the broker was down)
        raise RLJobError(f"step {step.index}'s rollout batch {batch.pk}: {batch.error}")
    if batch.episodes_completed == 0:
        first = Episode.objects.filter(batch=batch).exclude(error="").values_list("error")
        why = first[0][0][:300] if first else "no error recorded"
        raise RLJobError(
            f"every episode of step {step.index}'s batch {batch.pk} failed; the first: {why}"
        )
    return True


def _step_train(job: RLJob, step: RLStep) -> float | None:
    """Build, train, save and publish; then record the step and the new version."""
    RLStep.objects.filter(pk=step.pk).update(status=RLStepStatus.TRAINING)
    timings = {"rollout_s": _rollout_seconds(step), **_rollout_span(step)}
    timings["train_start"] = time.time()
    _next_rollouts_start(job, step)
    started = time.perf_counter()
    assert step.batch is not None  # checked by _rollout_finished
    build = rl_samples_for_batch(
        batch=step.batch,
        settings=AdvantageSettings(normalize_std=job.normalize_std),
        mode=job.reconstruction,
    )
    timings["build_s"] = time.perf_counter() - started
    metrics = {**rollout_metrics(batch_id=step.batch.pk), **build_metrics(build)}
    if not build.sequences:
        timings["train_end"] = time.time()
        return _step_record(job, step, metrics=metrics, timings=timings, produced=None)
    # The trainer starts from the newest version: the one the step sampled in sync mode,
    # the one after it in async mode once a step has trained meanwhile.
    trainer_version = _newest_version(job)
    metrics["staleness"] = trainer_version.number - step.version.number
    if metrics["staleness"] > 1:
        raise RLJobError(
            f"step {step.index} sampled version {step.version.number} but the trainer is at "
            f"version {trainer_version.number}: more than one version stale"
        )
    trained = _train(job, step, trainer_version, build, timings)
    metrics.update(trained.metrics)
    started = time.perf_counter()
    # Every replica serves the new version, or the step fails naming the one that refused.
    policy_adapter_serve(job.base_policy, name=trained.model_name, path=trained.adapter_dir)
    timings["publish_s"] = time.perf_counter() - started
    timings["train_end"] = time.time()
    return _step_record(job, step, metrics=metrics, timings=timings, produced=trained)


@dataclass
class Trained:
    number: int
    model_name: str
    adapter_dir: Path
    metrics: dict[str, Any]
    trainer: Any  # PolicyTrainer; kept for the next step once the version is committed


def _train(
    job: RLJob,
    step: RLStep,
    version: PolicyVersion,
    build: BatchBuild,
    timings: dict[str, float],
) -> Trained:
    """One trainer step from `version` on the step's batch (sampled by `step.version`)."""
    from training.rl import job_trainer
    from training.rl.trainer import LoraSettings, TrainSettings

    number = version.number + 1
    out_dir = settings.DATA_DIR / "rl" / f"job-{job.pk}" / f"v{number}"
    trainer_settings = TrainSettings(
        loss=job.algorithm,
        lr=job.learning_rate,
        cispo_eps_low=job.cispo_eps_low,
        cispo_eps_high=job.cispo_eps_high,
        grpo_eps=job.grpo_eps,
        kl_beta=job.kl_beta,
        behaviour_logprobs=behaviour_logprobs(step.version.policy),
        substeps=job.substeps,
        max_sequence_tokens=job.max_sequence_tokens,
        gradient_checkpointing=job.gradient_checkpointing,
    )
    started = time.perf_counter()
    trainer = job_trainer.trainer_for(
        job_trainer.TrainerKey(job.pk, version.number),
        model_dir=job.base_model_dir,
        adapter_dir=version.adapter_path or None,
        lora=LoraSettings(
            rank=job.lora_rank,
            alpha=2 * job.lora_rank,
            target_modules=tuple(job.lora_targets or LORA_TARGETS_DEFAULT),
        ),
        settings=trainer_settings,
        device=settings.RL_TRAIN_DEVICE,
    )
    timings["load_s"] = time.perf_counter() - started
    step_metrics, timings["save_s"] = job_trainer.train_and_save(trainer, build.sequences, out_dir)
    timings["train_s"] = step_metrics.seconds
    trained = step_metrics.to_json()
    trained.pop("seconds", None)
    trained["behaviour_logprobs"] = trainer_settings.behaviour_logprobs
    trained["gradient_checkpointing"] = _checkpointing_on(trainer)
    return Trained(number, f"rl-job-{job.pk}-v{number}", out_dir, trained, trainer)


def _checkpointing_on(trainer: Any) -> bool:
    from training.rl import memory

    return memory.gradient_checkpointing_on(trainer.model)


def job_sampling(job: RLJob, base: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling of the job's policies: the base policy's, with the job's tokens per
    turn (max_tokens) and temperature where it sets them."""
    sampling = dict(base)
    if job.tokens_per_turn is not None:
        sampling["max_tokens"] = job.tokens_per_turn
    if job.temperature is not None:
        sampling["temperature"] = job.temperature
    return sampling


def behaviour_logprobs(policy: PolicyConfig) -> str:
    """Whose logprobs a step's importance ratios divide by (TrainSettings explains why):
    vLLM's, unless the policy's replies were constrained by a JSON schema, whose masked
    logprobs no trainer can reproduce; then the trainer's own (one on-policy step)."""
    return "trainer" if policy.tool_call_format == ToolCallFormat.JSON_SCHEMA else "sampler"


def _rollout_seconds(step: RLStep) -> float:
    batch = step.batch
    if batch is None or batch.finished_at is None:
        return 0.0
    return (batch.finished_at - step.started_at).total_seconds()


def _rollout_span(step: RLStep) -> dict[str, float]:
    """When the step's rollouts started and ended, in seconds since the epoch (the job's
    idle fractions, training/rl/step_metrics.py)."""
    end = step.batch.finished_at if step.batch is not None else None
    return {
        "rollout_start": step.started_at.timestamp(),
        "rollout_end": (end or timezone.now()).timestamp(),
    }


@transaction.atomic
def _step_record(
    job: RLJob,
    step: RLStep,
    *,
    metrics: dict[str, Any],
    timings: dict[str, float],
    produced: Trained | None,
) -> float | None:
    locked = RLJob.objects.select_for_update().get(pk=job.pk)
    if locked.is_finished or locked.steps_done != step.index:
        return None  # cancelled meanwhile, or another attempt already recorded this step
    version = None
    if produced is not None:
        version = _version_create(job, step, produced)
    done = step.index + 1
    RLStep.objects.filter(pk=step.pk).update(
        status=RLStepStatus.DONE if version is not None else RLStepStatus.SKIPPED,
        produced=version,
        metrics=metrics,
        timings=timings,
        finished_at=timezone.now(),
    )
    finished = done >= job.steps
    if finished:
        jobs.finish(locked, steps_done=done)
    else:
        RLJob.objects.filter(pk=job.pk).update(steps_done=done)
    if produced is not None:
        trainer, key = produced.trainer, (job.pk, produced.number)
        transaction.on_commit(lambda: _trainer_keep(key, trainer))
    return None if finished else 0.0


def _trainer_keep(key: tuple[int, int], trainer: Any) -> None:
    from training.rl import job_trainer

    job_trainer.trainer_keep(job_trainer.TrainerKey(*key), trainer)


def _job_policy(job: RLJob, *, name: str, model: str) -> PolicyConfig:
    """A policy of the job: the base policy's settings with the job's sampling."""
    base = job.base_policy
    return adapter_policy(
        base, name=name, model=model, sampling=job_sampling(job, base.sampling or {})
    )


def _version0_policy(job: RLJob) -> PolicyConfig:
    """The base policy, or, when the job sets its own tokens per turn or temperature, a
    copy of it with them (the same served model) so version 0 samples as later ones do."""
    base = job.base_policy
    if job_sampling(job, base.sampling or {}) == (base.sampling or {}):
        return base
    return _job_policy(job, name=f"rl-job-{job.pk}-v0", model=base.model)


def _version_create(job: RLJob, step: RLStep, produced: Trained) -> PolicyVersion:
    policy = _job_policy(job, name=produced.model_name, model=produced.model_name)
    version, _ = PolicyVersion.objects.update_or_create(
        job=job,
        number=produced.number,
        defaults={
            "policy": policy,
            "adapter_path": str(produced.adapter_dir),
            "trained_at_step": step.index,
        },
    )
    return version
