"""SFT jobs on the job kernel (harness_app/jobs.py): a job whose task the broker does not
take fails with the reason, and the launch form, the API and resume say so; a finished job
tells `finished`; the one start-up handler recovers a job whose worker died."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app import jobs
from tests.training_sft.jobs import job_create
from training.models import JobStatus, SFTJob
from training.services.sft_jobs import sft_job_cancel, sft_job_run

NOT_QUEUED = "not queued, the task broker is unreachable: connection refused"


def _launch_data(export: Any, policy: Any, weights: Any) -> dict[str, Any]:
    return {
        "export": export.pk,
        "base_policy": policy.pk,
        "base_model_dir": str(weights),
        "epochs": 3.0,
        "learning_rate": 1e-4,
        "lora_rank": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "max_length": 2048,
        "batch_size": 1,
        "grad_accum": 1,
        "eval_fraction": 0.1,
        "eval_steps": 10,
        "save_steps": 50,
        "seed": 0,
    }


# Committed for real, as in production: the job is sent once the service's transaction
# commits, before the view answers.
@pytest.mark.django_db(transaction=True)
def test_the_launch_form_says_a_job_could_not_start_when_the_broker_is_down(
    researcher_client, export, llm_policy, weights_dir, broker_down
):
    response = researcher_client.post(
        "/training/sft/new/", _launch_data(export, llm_policy, weights_dir)
    )
    assert response.status_code == 200  # the form again, not the job's page
    job = SFTJob.objects.get()
    assert job.status == JobStatus.FAILED and job.error == NOT_QUEUED
    assert f"SFT job {job.pk} could not start: {NOT_QUEUED}" in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_api_answers_503_with_the_reason_when_the_broker_is_down(
    researcher_api, export, llm_policy, weights_dir, broker_down
):
    response = researcher_api.post(
        "/api/sft-jobs/",
        {"export": export.pk, "base_policy": llm_policy.pk, "base_model_dir": str(weights_dir)},
        format="json",
    )
    assert response.status_code == 503
    body = response.json()
    assert body["id"] == SFTJob.objects.get().pk and body["status"] == JobStatus.FAILED
    assert body["detail"] == NOT_QUEUED


@pytest.mark.django_db(transaction=True)
def test_a_resume_the_broker_does_not_take_answers_503(
    researcher_api, export, llm_policy, weights_dir, broker_down
):
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(
        status=JobStatus.CANCELLED, checkpoint_path=str(weights_dir)
    )
    response = researcher_api.post(f"/api/sft-jobs/{job.pk}/resume/")
    assert response.status_code == 503 and response.json()["detail"] == NOT_QUEUED
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.can_resume  # resumable once it is back


@pytest.mark.django_db
def test_a_job_that_completes_or_is_cancelled_tells_finished(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    seen: list[tuple[int, str]] = []

    def listen(sender: type, job: Any, **_: Any) -> None:
        if sender is SFTJob:
            seen.append((job.pk, job.status))

    jobs.finished.connect(listen)
    try:
        done = job_create(export, llm_policy, weights_dir)
        sft_job_run(job_id=done.pk)
        queued = job_create(export, llm_policy, weights_dir)
        sft_job_cancel(job=queued)
    finally:
        jobs.finished.disconnect(listen)
    assert seen == [(done.pk, JobStatus.COMPLETED), (queued.pk, JobStatus.CANCELLED)]


@pytest.mark.django_db
def test_the_one_start_up_handler_fails_a_job_whose_worker_died(export, llm_policy, weights_dir):
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    counts = jobs.recover(in_hand=frozenset())
    assert counts["training.SFTJob"] == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.error == "worker_lost: its worker died mid-training; resume it to go on"
