"""RL jobs on the job kernel (harness_app/jobs.py): a job whose task the broker does not
take fails with the reason, and the launch form and the API say so; a step the broker does
not take stops the job and its rollouts; a cancelled job tells `finished`; the start-up
recovery leaves a running RL job alone (between steps no task is in hand)."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app import jobs
from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from tests.training_rl.jobs import job_create
from training.models import JobStatus, RLJob
from training.services.rl_jobs import rl_job_advance, rl_job_cancel, rl_job_tick
from trajectories.models import BatchStatus

NOT_QUEUED = "not queued, the task broker is unreachable: connection refused"


@pytest.fixture
def policy(lora_server) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="smollm2"
    )


@pytest.mark.django_db(transaction=True)
def test_the_launch_form_says_a_job_could_not_start_when_the_broker_is_down(
    researcher_client, policy, weights_dir, broker_down
):
    data = {
        "benchmark": factories.demo_benchmark().pk,
        "base_policy": policy.pk,
        "base_model_dir": str(weights_dir),
        "steps": 2,
        "group_size": 2,
        "queries_per_step": 2,
        "algorithm": "cispo",
        "learning_rate": 1e-5,
        "lora_rank": 8,
        "cispo_eps_low": 1.0,
        "cispo_eps_high": 4.0,
        "grpo_eps": 0.2,
        "kl_beta": 0.0,
        "max_turns": 6,
        "termination_policy": "max_turns",
    }
    response = researcher_client.post("/training/rl/new/", data)
    assert response.status_code == 200  # the form again, not the job's page
    job = RLJob.objects.get()
    assert job.status == JobStatus.FAILED and job.error == NOT_QUEUED
    assert f"RL job {job.pk} could not start: {NOT_QUEUED}" in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_api_answers_503_with_the_reason_when_the_broker_is_down(
    researcher_api, policy, weights_dir, broker_down
):
    response = researcher_api.post(
        "/api/rl-jobs/",
        {
            "benchmark": factories.demo_benchmark().pk,
            "base_policy": policy.pk,
            "base_model_dir": str(weights_dir),
        },
        format="json",
    )
    assert response.status_code == 503
    body = response.json()
    assert body["id"] == RLJob.objects.get().pk and body["status"] == JobStatus.FAILED
    assert body["detail"] == NOT_QUEUED


@pytest.mark.django_db
def test_a_next_step_the_broker_does_not_take_fails_the_job_and_stops_its_rollouts(
    policy, weights_dir, broker_down
):
    job = job_create(factories.demo_benchmark(), policy, weights_dir)
    assert rl_job_tick(job_id=job.pk) == "not queued"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.error == NOT_QUEUED
    batch = job.step_rows.get(index=0).batch
    assert batch is not None and batch.status == BatchStatus.CANCELLED


@pytest.mark.django_db
def test_a_cancelled_job_tells_finished(policy, weights_dir):
    seen: list[tuple[int, str]] = []

    def listen(sender: type, job: Any, **_: Any) -> None:
        if sender is RLJob:
            seen.append((job.pk, job.status))

    jobs.finished.connect(listen)
    try:
        job = job_create(factories.demo_benchmark(), policy, weights_dir)
        rl_job_advance(job_id=job.pk)
        assert rl_job_cancel(job=job)
    finally:
        jobs.finished.disconnect(listen)
    assert seen == [(job.pk, JobStatus.CANCELLED)]


@pytest.mark.django_db
def test_the_start_up_recovery_leaves_a_running_job_between_steps_alone(policy, weights_dir):
    job = job_create(factories.demo_benchmark(), policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    counts = jobs.recover(in_hand=frozenset())
    assert "training.RLJob" not in counts
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.attempt == 1
