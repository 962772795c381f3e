"""RL jobs step by step: create checks, the advance state machine, training and publishing.

The rollouts here are written directly (the rollout workers and the real vLLM loop are
tested in test_rl_job_live.py); the trainer is the real one on SmolLM2 where a test
trains; vLLM's adapter endpoints are a small fake that records what it was asked to load.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import override_settings

from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from tests.training_rl.jobs import job_create, rollouts_finish, step_batch
from training.models import PolicyVersion, RLJob, RLJobStatus, RLStepStatus
from training.services import rl_jobs
from training.services.rl_jobs import RLJobError, rl_job_advance
from trajectories.models import (
    BatchStatus,
    EpisodeStatus,
)
from trajectories.services.rollouts import batch_cancel

pytestmark = pytest.mark.django_db


# --- create ----------------------------------------------------------------------------------


def test_a_baseline_policy_is_refused_because_rl_needs_a_served_model(weights_dir):
    with pytest.raises(RLJobError, match=r"base_policy 'baseline' .* OpenAI-compatible"):
        job_create(factories.demo_benchmark(), factories.baseline_policy(), weights_dir)
    assert not RLJob.objects.exists()


def test_a_folder_without_weights_is_refused_with_its_path(llm_policy, tmp_path):
    message = f"base_model_dir '{tmp_path}' has no config.json"
    with pytest.raises(RLJobError, match=re.escape(message)):
        job_create(factories.demo_benchmark(), llm_policy, tmp_path)
    assert not RLJob.objects.exists()


def test_a_path_the_system_cannot_read_is_refused_naming_the_field(llm_policy, tmp_path):
    # A path part over 255 characters made the check itself raise OSError (a 500).
    with pytest.raises(RLJobError, match=r"base_model_dir .* cannot be read: File name too long"):
        job_create(factories.demo_benchmark(), llm_policy, f"{tmp_path}/{'x' * 300}")
    assert not RLJob.objects.exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"group_size": 1}, "group_size must be between 2 and 64, got 1"),
        ({"lora_rank": 0}, "lora_rank must be between 1 and 64"),
        ({"learning_rate": 0.0}, "learning_rate must be in"),
        ({"algorithm": "ppo"}, "algorithm 'ppo' is not one of"),
        ({"kl_beta": -0.1}, "kl_beta must be a finite number >= 0"),
        ({"reward_weights": {"bonus": 1}}, "reward_weights: unknown reward weight"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(llm_policy, weights_dir, setting, message):
    with pytest.raises(RLJobError, match=message):
        job_create(factories.demo_benchmark(), llm_policy, weights_dir, **setting)
    assert not RLJob.objects.exists()


def test_a_new_job_starts_at_version_0_the_base_policy(llm_policy, weights_dir):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    assert job.status == RLJobStatus.QUEUED
    assert [(v.number, v.policy_id, v.adapter_path) for v in job.versions.all()] == [
        (0, llm_policy.pk, "")
    ]


def test_steps_take_successive_slices_of_the_queries_and_wrap(llm_policy, weights_dir):
    benchmark = factories.demo_benchmark()
    job = job_create(benchmark, llm_policy, weights_dir, queries_per_step=5)
    ids = list(benchmark.queries.order_by("pk").values_list("pk", flat=True))
    assert len(ids) == 12
    assert rl_jobs.step_query_ids(job, 0) == ids[0:5]
    assert rl_jobs.step_query_ids(job, 1) == ids[5:10]
    assert rl_jobs.step_query_ids(job, 2) == ids[10:12] + ids[0:3]


# --- advance ---------------------------------------------------------------------------------


def test_the_first_advance_samples_g_rollouts_per_query_from_version_0(llm_policy, weights_dir):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir, group_size=3)
    wait = rl_job_advance(job_id=job.pk)
    job.refresh_from_db()
    assert wait is not None and wait > 0
    assert job.status == RLJobStatus.RUNNING and job.started_at is not None
    step = job.step_rows.get()
    assert (step.index, step.status, step.version.number) == (0, RLStepStatus.ROLLOUT, 0)
    batch = step_batch(job, 0)
    assert batch.policy == llm_policy and batch.samples_per_query == 3
    assert sorted(batch.groups.values_list("query_id", flat=True)) == (
        rl_jobs.step_query_ids(job, 0)
    )
    # While the rollouts run, advancing only waits.
    assert rl_job_advance(job_id=job.pk) == wait
    assert job.step_rows.count() == 1


def test_a_cancelled_rollout_batch_fails_the_job_saying_so(llm_policy, weights_dir):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    batch_cancel(batch=step_batch(job, 0))
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.FAILED
    assert job.error == f"step 0's rollout batch {step_batch(job, 0).pk} was cancelled"
    assert job.step_rows.get().status == RLStepStatus.FAILED


def test_a_batch_whose_episodes_all_failed_fails_the_job_with_the_first_error(
    llm_policy, weights_dir
):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    rollouts_finish(step_batch(job, 0), [0.0] * 4, status=EpisodeStatus.FAILED)
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.FAILED
    assert "every episode of step 0's batch" in job.error
    assert "vLLM answered 500" in job.error


def test_a_step_without_reward_variance_trains_nothing_and_the_next_samples_the_same_version(
    llm_policy, weights_dir, lora_server
):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    rollouts_finish(step_batch(job, 0), [0.5, 0.5, 0.25, 0.25])
    assert rl_job_advance(job_id=job.pk) == 0.0  # straight on to the next step
    step = job.step_rows.get(index=0)
    assert step.status == RLStepStatus.SKIPPED and step.produced is None
    assert step.metrics["kept_groups"] == 0 and step.metrics["dropped_groups"] == 2
    assert step.metrics["reward_mean"] == pytest.approx(0.375)
    assert lora_server.loads == []
    rl_job_advance(job_id=job.pk)
    assert step_batch(job, 1).policy == llm_policy
    assert job.versions.count() == 1


def test_cancelling_a_job_stops_its_running_batch(llm_policy, weights_dir):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    assert rl_jobs.rl_job_cancel(job=job) is True
    job.refresh_from_db()
    assert job.status == RLJobStatus.CANCELLED
    assert step_batch(job, 0).status == BatchStatus.CANCELLED
    assert rl_job_advance(job_id=job.pk) is None
    assert rl_jobs.rl_job_cancel(job=job) is False


# --- a trained step (the real trainer on SmolLM2) ------------------------------------------


def test_a_trained_step_serves_a_new_version_that_the_next_step_samples(
    smollm2_dir, lora_server, settings, tmp_path
):
    settings.DATA_DIR = tmp_path
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="smollm2"
    )
    job = job_create(factories.demo_benchmark(), policy, smollm2_dir, steps=2, learning_rate=1e-4)
    rl_job_advance(job_id=job.pk)
    # Group one has signal (1.0 against 0.0); group two none.
    rollouts_finish(step_batch(job, 0), [1.0, 0.0, 0.3, 0.3])
    assert rl_job_advance(job_id=job.pk) == 0.0

    step = job.step_rows.get(index=0)
    assert step.status == RLStepStatus.DONE
    v1 = PolicyVersion.objects.get(job=job, number=1)
    assert step.produced == v1 and v1.trained_at_step == 0
    adapter = Path(v1.adapter_path)
    assert (adapter / "adapter_model.safetensors").is_file()
    assert (adapter / "optimizer.pt").is_file()
    assert lora_server.loads == [{"lora_name": f"rl-job-{job.pk}-v1", "lora_path": str(adapter)}]
    assert v1.policy.model == f"rl-job-{job.pk}-v1" and v1.policy.base_url == policy.base_url
    m = step.metrics
    assert (m["kept_groups"], m["dropped_groups"], m["kept_fraction"]) == (1, 1, 0.5)
    # Two episodes of one merged chain each; 2 calls × 2 sampled tokens per episode.
    assert m["sequences"] == 2 and m["tokens"] == 8
    assert m["loss"] != 0.0 and m["logprob_gap"] > 0  # the recorded logprobs are made up
    assert m["reward_components"]["diversity"] == pytest.approx(0.1)
    assert set(step.timings) >= {"rollout_s", "build_s", "train_s", "save_s", "publish_s"}

    # The next step samples from v1, so its episodes run (and are stamped) under v1.
    rl_job_advance(job_id=job.pk)
    assert step_batch(job, 1).policy == v1.policy
    rollouts_finish(step_batch(job, 1), [0.0, 1.0, 0.2, 0.6])
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.COMPLETED and job.steps_done == 2
    assert [v.number for v in job.versions.all()] == [0, 1, 2]


@override_settings(RL_POLL_S=0.5)
def test_a_restarted_server_gets_the_current_adapter_again_before_sampling(
    llm_policy, weights_dir, lora_server
):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    v1_policy = PolicyConfig.objects.create(
        name="v1", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="job-v1"
    )
    PolicyVersion.objects.create(
        job=job, number=1, policy=v1_policy, adapter_path=str(weights_dir), trained_at_step=0
    )
    assert rl_job_advance(job_id=job.pk) == 0.5
    assert lora_server.loads == [{"lora_name": "job-v1", "lora_path": str(weights_dir)}]
    assert step_batch(job, 0).policy == v1_policy


@override_settings(RL_POLL_S=0.5, VLLM_API_KEY="sk-rl")
def test_adapters_are_published_with_the_model_servers_key(
    llm_policy, weights_dir, lora_server, settings
):
    settings.VLLM_BASE_URL = lora_server.base_url  # the job's server is the configured one
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    v1_policy = PolicyConfig.objects.create(
        name="v1", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="job-v1"
    )
    PolicyVersion.objects.create(
        job=job, number=1, policy=v1_policy, adapter_path=str(weights_dir), trained_at_step=0
    )
    rl_job_advance(job_id=job.pk)
    assert lora_server.loads  # listed the models, then loaded the adapter
    assert lora_server.authorizations and set(lora_server.authorizations) == {"Bearer sk-rl"}
