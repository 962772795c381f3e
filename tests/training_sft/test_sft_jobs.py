"""SFT jobs through their services: create checks, a run with the trainer faked (progress,
publishing, the policy), cancel, resume, failures, and an RL job warm-started from one.

The trainer here is tests/training_sft/fake_trainer.py (training/sft/train.py's interface,
no model); vLLM's adapter endpoints are the fake server that records what it loaded.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import F
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from tests.training_sft.fake_trainer import SFTDataError, SFTProgress, SFTResult
from tests.training_sft.jobs import job_create
from training.models import ExportStatus, RLJob, SFTExport, SFTJob, SFTJobStatus
from training.services import sft_jobs
from training.services.rl_jobs import RLJobError, RLJobSettings, rl_job_create
from training.services.sft_jobs import SFTJobError, sft_job_run

pytestmark = pytest.mark.django_db


# --- create ----------------------------------------------------------------------------------


def test_an_export_that_is_not_done_is_refused_naming_the_field(llm_policy, weights_dir):
    export = SFTExport.objects.create(status=ExportStatus.RUNNING)
    with pytest.raises(SFTJobError, match=f"export {export.pk} is running") as caught:
        job_create(export, llm_policy, weights_dir)
    assert caught.value.field == "export"
    assert not SFTJob.objects.exists()


def test_an_empty_export_is_refused_naming_the_field(llm_policy, weights_dir):
    export = SFTExport.objects.create(status=ExportStatus.DONE, records=0)
    with pytest.raises(SFTJobError, match="holds no records") as caught:
        job_create(export, llm_policy, weights_dir)
    assert caught.value.field == "export"


def test_a_baseline_policy_is_refused_because_vllm_serves_the_adapter(
    export, baseline_policy, weights_dir
):
    with pytest.raises(SFTJobError, match=r"base_policy 'baseline' .* OpenAI-compatible") as c:
        job_create(export, baseline_policy, weights_dir)
    assert c.value.field == "base_policy"


def test_a_folder_without_weights_is_refused_with_its_path(export, llm_policy, tmp_path):
    message = f"base_model_dir '{tmp_path}' has no config.json"
    with pytest.raises(SFTJobError, match=re.escape(message)) as caught:
        job_create(export, llm_policy, tmp_path)
    assert caught.value.field == "base_model_dir"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"lora_rank": 0}, "lora_rank must be between 1 and 64, got 0"),
        ({"epochs": 0.0}, "epochs must be in"),
        ({"eval_fraction": 1.0}, "eval_fraction must be in [0, 1), got 1.0"),
        ({"lora_targets": []}, "lora_targets must be a non-empty list"),
        ({"learning_rate": -1e-4}, "learning_rate must be in (0, 1]"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(
    export, llm_policy, weights_dir, setting, message
):
    with pytest.raises(SFTJobError, match=re.escape(message)) as caught:
        job_create(export, llm_policy, weights_dir, **setting)
    assert caught.value.field == next(iter(setting))
    assert not SFTJob.objects.exists()


def test_a_new_job_is_queued_with_the_papers_defaults(export, llm_policy, weights_dir):
    job = job_create(export, llm_policy, weights_dir)
    assert job.status == SFTJobStatus.QUEUED
    assert (job.lora_rank, job.lora_alpha, job.epochs) == (32, 64, 3.0)
    assert job.lora_targets == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert job.output_dir.endswith(f"sft/job-{job.pk}")


def test_create_queues_the_run_on_the_training_queue_once_committed(
    export, llm_policy, weights_dir, monkeypatch, django_capture_on_commit_callbacks
):
    sent: list[tuple] = []
    monkeypatch.setattr(sft_jobs.queues, "enqueue", lambda *args, **kw: sent.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        job = sft_jobs.sft_job_create(
            export=export,
            base_policy=llm_policy,
            base_model_dir=str(weights_dir),
            job_settings=sft_jobs.SFTJobSettings(),
        )
    assert sent == [("training.tasks.sft_job_run_task", job.pk)]


# --- run -------------------------------------------------------------------------------------


def test_a_run_trains_saves_its_curve_publishes_the_adapter_and_writes_its_policy(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    job = job_create(export, llm_policy, weights_dir, epochs=1.0, max_length=512)
    done = sft_job_run(job_id=job.pk)
    assert done is not None and done.status == SFTJobStatus.COMPLETED, done and done.error
    call = fake_trainer.calls[0]
    assert call["settings"].epochs == 1.0 and call["settings"].max_length == 512
    assert call["settings"].lora_targets == tuple(job.lora_targets)  # a tuple, as the trainer's
    assert call["export_path"] == export.file_path and call["resume"] is False
    assert call["model_dir"] == job.base_model_dir and call["output_dir"] == job.output_dir
    # One episode id per export line, so the eval split is by episode.
    items = list(export.items.order_by("first_line"))
    assert call["episode_of_line"] == [i.episode_id for i in items for _ in range(i.records)]
    assert call["chat_template"] == Path("scripts/llm/chat_template.jinja").read_text()
    # The history merges the eval loss logged at a step into that step's point.
    assert [(p["step"], p["loss"], p["eval_loss"]) for p in done.history] == [
        (0, None, 2.5),
        (1, 2.0, None),
        (2, 1.5, None),
        (3, 1.0, 1.25),
    ]
    assert (done.step, done.total_steps, done.progress) == (3, 3, 1.0)
    assert done.metrics["eval_loss_after"] == 1.25 and done.manifest["input"] == "chat_template"
    name = f"sft-job-{job.pk}"
    adapter = Path(job.output_dir) / "adapter"
    assert lora_server.loads == [{"lora_name": name, "lora_path": str(adapter.resolve())}]
    assert done.adapter_path == str(adapter)
    assert done.policy is not None
    assert (done.policy.name, done.policy.model, done.policy.base_url) == (
        name,
        name,
        llm_policy.base_url,
    )
    assert done.policy.sampling == llm_policy.sampling


def test_progress_reaches_the_row_while_the_trainer_runs(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    seen: list[tuple[str, int, int]] = []

    def script(**kwargs):
        kwargs["progress"](SFTProgress(1, 4, 0.25, 2.0, None, 1e-4, 100.0))
        row = SFTJob.objects.get(pk=job.pk)
        seen.append((row.status, row.step, row.total_steps))
        raise SFTDataError("no approved record fits in max_length")

    fake_trainer.script = script
    job = job_create(export, llm_policy, weights_dir)
    failed = sft_job_run(job_id=job.pk)
    assert seen == [(SFTJobStatus.RUNNING, 1, 4)]
    assert failed is not None and failed.status == SFTJobStatus.FAILED
    assert failed.error == "no approved record fits in max_length"
    assert failed.history[-1]["loss"] == 2.0 and failed.finished_at is not None
    assert lora_server.loads == []


def test_an_unexpected_trainer_crash_fails_the_job_naming_the_exception(
    export, llm_policy, weights_dir, fake_trainer
):
    def script(**kwargs):
        raise KeyError("lm_head")

    fake_trainer.script = script
    job = job_create(export, llm_policy, weights_dir)
    failed = sft_job_run(job_id=job.pk)
    assert failed is not None and failed.status == SFTJobStatus.FAILED
    assert failed.error == "KeyError: 'lm_head'"


def test_a_refused_publish_fails_the_job_keeping_the_adapter_to_publish_later(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    lora_server.refuse = {"load_lora_adapter": 500}  # vLLM: rank above --max-lora-rank
    job = job_create(export, llm_policy, weights_dir)
    failed = sft_job_run(job_id=job.pk)
    assert failed is not None and failed.status == SFTJobStatus.FAILED
    assert "load_lora_adapter answered 500" in failed.error
    assert f"the adapter is saved in {failed.adapter_path}" in failed.error
    assert failed.policy is None and failed.metrics["eval_loss_after"] == 1.25
    assert not failed.can_resume  # trained already: publish, do not train again
    with pytest.raises(SFTJobError, match="finished training: publish its adapter instead"):
        sft_jobs.sft_job_resume(job=failed)
    # Once the server takes it, publishing completes the job without training again.
    lora_server.refuse = {}
    assert sft_jobs.sft_job_publish(job=failed) is True
    failed.refresh_from_db()
    assert failed.status == SFTJobStatus.COMPLETED and failed.error == ""
    assert failed.policy is not None and failed.policy.model == f"sft-job-{job.pk}"
    assert len(fake_trainer.calls) == 1


def test_only_a_trained_adapter_is_published(export, llm_policy, weights_dir):
    job = job_create(export, llm_policy, weights_dir)
    with pytest.raises(SFTJobError, match="is queued without a trained adapter to publish"):
        sft_jobs.sft_job_publish(job=job)


# --- cancel and resume -----------------------------------------------------------------------


def test_cancelling_a_queued_job_cancels_it_at_once(export, llm_policy, weights_dir, fake_trainer):
    job = job_create(export, llm_policy, weights_dir)
    assert sft_jobs.sft_job_cancel(job=job) is True
    job.refresh_from_db()
    assert job.status == SFTJobStatus.CANCELLED and job.finished_at is not None
    assert sft_job_run(job_id=job.pk) is None  # a late task does nothing
    assert fake_trainer.calls == []
    assert sft_jobs.sft_job_cancel(job=job) is False


def _stops_when_asked(**kwargs) -> SFTResult:
    """Trains until should_stop says so, then checkpoints and returns cancelled."""
    output = Path(kwargs["output_dir"])
    start = 3 if kwargs["resume"] else 0
    for step in range(start + 1, 7):
        kwargs["progress"](SFTProgress(step, 6, step / 2, 3.0 - step / 3, None, 1e-4, 50.0))
        if step == 2:
            SFTJob.objects.filter(output_dir=str(output)).update(cancel_requested=True)
        if kwargs["should_stop"]():
            checkpoint = output / f"checkpoint-{step}"
            return SFTResult("cancelled", None, checkpoint, {"steps": step}, {})
    adapter = output / "adapter"
    adapter.mkdir(parents=True, exist_ok=True)
    return SFTResult("completed", adapter, output / "checkpoint-6", {"steps": 6}, {})


def test_cancelling_a_running_job_stops_its_trainer_at_a_checkpoint_and_resume_goes_on(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    fake_trainer.script = _stops_when_asked
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(status=SFTJobStatus.RUNNING)
    assert sft_jobs.sft_job_cancel(job=job) is True
    job.refresh_from_db()
    assert job.status == SFTJobStatus.RUNNING and job.cancel_requested  # asked, not stopped
    SFTJob.objects.filter(pk=job.pk).update(status=SFTJobStatus.QUEUED, cancel_requested=False)

    cancelled = sft_job_run(job_id=job.pk)  # the fake asks to cancel at step 2
    assert cancelled is not None and cancelled.status == SFTJobStatus.CANCELLED
    assert cancelled.step == 2 and cancelled.checkpoint_path.endswith("checkpoint-2")
    assert cancelled.can_resume

    resumed = sft_jobs.sft_job_resume(job=cancelled, enqueue=False)
    assert resumed.status == SFTJobStatus.QUEUED and not resumed.cancel_requested
    SFTJob.objects.filter(pk=job.pk).update(history=[*cancelled.history, {"step": 5, "loss": 9.0}])
    done = sft_job_run(job_id=job.pk)
    assert done is not None and done.status == SFTJobStatus.COMPLETED, done and done.error
    assert fake_trainer.calls[-1]["resume"] is True
    # Points the resumed run passes again are replaced by its own.
    assert [p["step"] for p in done.history] == [1, 2, 4, 5, 6]
    assert done.history[3]["loss"] == pytest.approx(3.0 - 5 / 3)
    assert [load["lora_name"] for load in lora_server.loads] == [f"sft-job-{job.pk}"]


def test_a_job_without_a_checkpoint_cannot_resume(export, llm_policy, weights_dir):
    job = job_create(export, llm_policy, weights_dir)
    with pytest.raises(SFTJobError, match="is queued: only a cancelled or failed job"):
        sft_jobs.sft_job_resume(job=job)
    SFTJob.objects.filter(pk=job.pk).update(status=SFTJobStatus.FAILED)
    with pytest.raises(SFTJobError, match="has no checkpoint"):
        sft_jobs.sft_job_resume(job=job)


def test_a_published_adapter_is_served_again_after_a_server_restart(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    job = job_create(export, llm_policy, weights_dir)
    done = sft_job_run(job_id=job.pk)
    assert done is not None
    assert sft_jobs.sft_job_publish(job=done) is False  # still served
    lora_server.models.discard(f"sft-job-{job.pk}")  # what a restart forgets
    assert sft_jobs.sft_job_publish(job=done) is True
    assert len(lora_server.loads) == 2


# --- warm start ------------------------------------------------------------------------------


@pytest.fixture
def sft_done(export, llm_policy, weights_dir, fake_trainer, lora_server) -> SFTJob:
    job = job_create(export, llm_policy, weights_dir, lora_rank=16, lora_targets=["q_proj"])
    done = sft_job_run(job_id=job.pk)
    assert done is not None and done.status == SFTJobStatus.COMPLETED
    return done


def test_an_rl_job_warm_started_from_sft_samples_and_trains_from_its_adapter(
    sft_done, demo_benchmark
):
    # The SFT job gives the base policy and weights; its adapter's shape replaces rank 8.
    job = _rl_warm(sft_done, demo_benchmark)
    assert job.warm_start == sft_done
    assert job.base_policy == sft_done.policy and job.base_model_dir == sft_done.base_model_dir
    assert (job.lora_rank, job.lora_targets) == (16, ["q_proj"])
    version0 = job.versions.get(number=0)
    assert version0.adapter_path == sft_done.adapter_path
    assert version0.policy.model == f"sft-job-{sft_done.pk}"
    assert list(sft_done.rl_jobs.all()) == [job]


def _rl_warm(sft_done: SFTJob, benchmark) -> RLJob:
    return rl_job_create(
        benchmark=benchmark,
        base_policy=None,
        job_settings=RLJobSettings(group_size=2, queries_per_step=2, lora_rank=8),
        warm_start=sft_done,
        enqueue=False,
    )


def test_an_rl_job_cannot_warm_start_from_an_unfinished_sft_job(
    export, llm_policy, weights_dir, demo_benchmark
):
    queued = job_create(export, llm_policy, weights_dir)
    with pytest.raises(RLJobError, match="is queued without a published adapter") as caught:
        _rl_warm(queued, demo_benchmark)
    assert caught.value.field == "warm_start"
    assert not RLJob.objects.exists()


@override_settings(SFT_CHAT_TEMPLATE_PATH=Path("/nonexistent/template.jinja"))
def test_without_the_template_file_the_trainer_gets_none(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    job = job_create(export, llm_policy, weights_dir)
    sft_job_run(job_id=job.pk)
    assert fake_trainer.calls[0]["chat_template"] is None


def test_the_job_settings_fill_the_real_trainers_settings():
    # Where training/sft/train.py is present, every job setting is one of its settings.
    trainer = pytest.importorskip("training.sft.train")
    from training.sft.settings import SFTJobSettings

    names = set(SFTJobSettings.__dataclass_fields__)
    assert names <= set(trainer.SFTSettings.__dataclass_fields__)
    trainer.SFTSettings(**{**SFTJobSettings().as_fields(), "lora_targets": ("q_proj",)}).check()


def test_a_redelivered_running_job_resumes_from_what_its_dead_worker_saved(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(status=SFTJobStatus.RUNNING)
    done = sft_job_run(job_id=job.pk)
    assert done is not None and done.status == SFTJobStatus.COMPLETED
    assert fake_trainer.calls[0]["resume"] is True


def test_a_run_superseded_by_a_redelivery_stops_and_writes_nothing(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    def script(**kwargs):
        kwargs["progress"](SFTProgress(1, 4, 0.25, 2.0, None, 1e-4, 100.0))
        # The broker hands the task to another worker, which claims the job again.
        SFTJob.objects.filter(pk=job.pk).update(attempt=F("attempt") + 1, history=[])
        assert kwargs["should_stop"]()
        kwargs["progress"](SFTProgress(2, 4, 0.5, 1.5, None, 1e-4, 100.0))
        return SFTResult("completed", Path(kwargs["output_dir"]), None, {"steps": 2}, {})

    fake_trainer.script = script
    job = job_create(export, llm_policy, weights_dir)
    after = sft_job_run(job_id=job.pk)
    assert after is not None and after.status == SFTJobStatus.RUNNING  # the newer run's
    assert after.history == [] and after.metrics == {} and after.policy is None
    assert lora_server.loads == []


def test_progress_writes_at_most_once_a_second_and_always_the_last_step(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    writes: list[int] = []

    def script(**kwargs):
        with CaptureQueriesContext(connection) as queries:
            for step in range(1, 51):
                kwargs["progress"](SFTProgress(step, 50, step / 50, 1.0, None, 1e-4, 10.0))
        writes.extend(1 for q in queries.captured_queries if q["sql"].startswith("UPDATE"))
        raise SFTDataError("stop here")

    fake_trainer.script = script
    job = job_create(export, llm_policy, weights_dir)
    failed = sft_job_run(job_id=job.pk)
    assert len(writes) == 2  # the first step, then the last
    assert failed is not None and failed.step == 50 and len(failed.history) == 50
