"""RL jobs step by step: create checks, the advance state machine, training and publishing.

The rollouts here are written directly (the rollout workers and the real vLLM loop are
tested in test_rl_job_live.py); the trainer is the real one on SmolLM2 where a test
trains; vLLM's adapter endpoints are a small fake that records what it was asked to load.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from harness_app.models import PolicyConfig, PolicyKind
from tests.api import factories
from training import services_rl
from training.models import PolicyVersion, RLJob, RLJobStatus, RLStepStatus
from training.services_rl import RLJobError, RLJobSettings, rl_job_advance, rl_job_create
from trajectories.models import (
    BatchStatus,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    pack_floats,
    pack_ints,
)
from trajectories.services import batch_cancel

pytestmark = pytest.mark.django_db


class FakeLoraServer:
    """GET /v1/models and the runtime LoRA endpoints, as vLLM answers them."""

    def __init__(self) -> None:
        self.models = {"smollm2"}
        self.loads: list[dict[str, str]] = []
        self.unloads: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(200, {"data": [{"id": m} for m in sorted(fake.models)]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/load_lora_adapter"):
                    if body["lora_name"] in fake.models:
                        return self._answer(400, {"error": "already loaded"})
                    fake.loads.append(body)
                    fake.models.add(body["lora_name"])
                elif self.path.endswith("/unload_lora_adapter"):
                    fake.unloads.append(body["lora_name"])
                    fake.models.discard(body["lora_name"])
                self._answer(200, {})

        return Handler


@pytest.fixture
def lora_server():
    server = FakeLoraServer()
    yield server
    server.close()


@pytest.fixture
def weights_dir(tmp_path: Path) -> Path:
    """A folder that looks like model weights to the create checks (the trainer is never
    started on it)."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


@pytest.fixture
def llm_policy(lora_server) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=lora_server.base_url,
        model="smollm2",
        tool_call_format="json_schema",
        sampling={"temperature": 1.0, "max_tokens": 64},
    )


def _job(benchmark, policy, model_dir, **settings: Any) -> RLJob:
    defaults: dict[str, Any] = {"group_size": 2, "queries_per_step": 2, "steps": 2}
    return rl_job_create(
        benchmark=benchmark,
        base_policy=policy,
        base_model_dir=str(model_dir),
        job_settings=RLJobSettings(**{**defaults, **settings}),
        enqueue=False,
    )


def _finish(batch: RolloutBatch, rewards: list[float], *, status=EpisodeStatus.COMPLETED) -> None:
    """Play the batch's episodes on paper: each gets a reward (in order of group, then
    sample) and two prefix-merging model calls with SmolLM2-sized token ids."""
    episodes = list(batch.episodes.order_by("group_id", "sample_index"))
    for i, (episode, reward) in enumerate(zip(episodes, rewards, strict=True)):
        episode.status, episode.reward = status, reward
        episode.termination_reason = "end_search" if status == EpisodeStatus.COMPLETED else "x"
        episode.error = "" if status == EpisodeStatus.COMPLETED else "vLLM answered 500"
        episode.curated_recall = reward / 2
        episode.reward_components = {"f_beta": reward / 3, "diversity": 0.1}
        episode.save()
        version = batch.policy.name
        ModelCall.objects.bulk_create(
            ModelCall(
                episode=episode,
                turn_index=turn,
                request={},
                prompt_token_ids_blob=pack_ints(prompt),
                completion_token_ids_blob=pack_ints(completion),
                completion_logprobs_blob=pack_floats([-2.0] * len(completion)),
                policy_version=version,
            )
            for turn, (prompt, completion) in enumerate(
                # Each episode samples different tokens, so their gradients do not cancel.
                [([1, 504, 33], [288 + i, 4521]), ([1, 504, 33, 288 + i, 4521, 30], [77 + i, 2])]
            )
        )
    completed = sum(1 for _ in episodes) if status == EpisodeStatus.COMPLETED else 0
    RolloutBatch.objects.filter(pk=batch.pk).update(
        status=BatchStatus.COMPLETED if completed else BatchStatus.FAILED,
        episodes_completed=completed,
        episodes_failed=len(episodes) - completed,
    )


def _step_batch(job: RLJob, index: int) -> RolloutBatch:
    batch = job.step_rows.get(index=index).batch
    assert batch is not None
    return batch


# --- create ----------------------------------------------------------------------------------


def test_a_baseline_policy_is_refused_because_rl_needs_a_served_model(weights_dir):
    with pytest.raises(RLJobError, match=r"base_policy 'baseline' .* OpenAI-compatible"):
        _job(factories.demo_benchmark(), factories.baseline_policy(), weights_dir)
    assert not RLJob.objects.exists()


def test_a_folder_without_weights_is_refused_with_its_path(llm_policy, tmp_path):
    message = f"base_model_dir '{tmp_path}' has no config.json"
    with pytest.raises(RLJobError, match=re.escape(message)):
        _job(factories.demo_benchmark(), llm_policy, tmp_path)
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
        _job(factories.demo_benchmark(), llm_policy, weights_dir, **setting)
    assert not RLJob.objects.exists()


def test_a_new_job_starts_at_version_0_the_base_policy(llm_policy, weights_dir):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir)
    assert job.status == RLJobStatus.QUEUED
    assert [(v.number, v.policy_id, v.adapter_path) for v in job.versions.all()] == [
        (0, llm_policy.pk, "")
    ]


def test_steps_take_successive_slices_of_the_queries_and_wrap(llm_policy, weights_dir):
    benchmark = factories.demo_benchmark()
    job = _job(benchmark, llm_policy, weights_dir, queries_per_step=5)
    ids = list(benchmark.queries.order_by("pk").values_list("pk", flat=True))
    assert len(ids) == 12
    assert services_rl.step_query_ids(job, 0) == ids[0:5]
    assert services_rl.step_query_ids(job, 1) == ids[5:10]
    assert services_rl.step_query_ids(job, 2) == ids[10:12] + ids[0:3]


# --- advance ---------------------------------------------------------------------------------


def test_the_first_advance_samples_g_rollouts_per_query_from_version_0(llm_policy, weights_dir):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir, group_size=3)
    wait = rl_job_advance(job_id=job.pk)
    job.refresh_from_db()
    assert wait is not None and wait > 0
    assert job.status == RLJobStatus.RUNNING and job.started_at is not None
    step = job.step_rows.get()
    assert (step.index, step.status, step.version.number) == (0, RLStepStatus.ROLLOUT, 0)
    batch = _step_batch(job, 0)
    assert batch.policy == llm_policy and batch.samples_per_query == 3
    assert sorted(batch.groups.values_list("query_id", flat=True)) == (
        services_rl.step_query_ids(job, 0)
    )
    # While the rollouts run, advancing only waits.
    assert rl_job_advance(job_id=job.pk) == wait
    assert job.step_rows.count() == 1


def test_a_cancelled_rollout_batch_fails_the_job_saying_so(llm_policy, weights_dir):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    batch_cancel(batch=_step_batch(job, 0))
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.FAILED
    assert job.error == f"step 0's rollout batch {_step_batch(job, 0).pk} was cancelled"
    assert job.step_rows.get().status == RLStepStatus.FAILED


def test_a_batch_whose_episodes_all_failed_fails_the_job_with_the_first_error(
    llm_policy, weights_dir
):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    _finish(_step_batch(job, 0), [0.0] * 4, status=EpisodeStatus.FAILED)
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.FAILED
    assert "every episode of step 0's batch" in job.error
    assert "vLLM answered 500" in job.error


def test_a_step_without_reward_variance_trains_nothing_and_the_next_samples_the_same_version(
    llm_policy, weights_dir, lora_server
):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    _finish(_step_batch(job, 0), [0.5, 0.5, 0.25, 0.25])
    assert rl_job_advance(job_id=job.pk) == 0.0  # straight on to the next step
    step = job.step_rows.get(index=0)
    assert step.status == RLStepStatus.SKIPPED and step.produced is None
    assert step.metrics["kept_groups"] == 0 and step.metrics["dropped_groups"] == 2
    assert step.metrics["reward_mean"] == pytest.approx(0.375)
    assert lora_server.loads == []
    rl_job_advance(job_id=job.pk)
    assert _step_batch(job, 1).policy == llm_policy
    assert job.versions.count() == 1


def test_cancelling_a_job_stops_its_running_batch(llm_policy, weights_dir):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir)
    rl_job_advance(job_id=job.pk)
    assert services_rl.rl_job_cancel(job=job) is True
    job.refresh_from_db()
    assert job.status == RLJobStatus.CANCELLED
    assert _step_batch(job, 0).status == BatchStatus.CANCELLED
    assert rl_job_advance(job_id=job.pk) is None
    assert services_rl.rl_job_cancel(job=job) is False


# --- a trained step (the real trainer on SmolLM2) ------------------------------------------


def test_a_trained_step_serves_a_new_version_that_the_next_step_samples(
    smollm2_dir, lora_server, settings, tmp_path
):
    settings.DATA_DIR = tmp_path
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="smollm2"
    )
    job = _job(factories.demo_benchmark(), policy, smollm2_dir, steps=2, learning_rate=1e-4)
    rl_job_advance(job_id=job.pk)
    # Group one has signal (1.0 against 0.0); group two none.
    _finish(_step_batch(job, 0), [1.0, 0.0, 0.3, 0.3])
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
    assert _step_batch(job, 1).policy == v1.policy
    _finish(_step_batch(job, 1), [0.0, 1.0, 0.2, 0.6])
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.COMPLETED and job.steps_done == 2
    assert [v.number for v in job.versions.all()] == [0, 1, 2]


@override_settings(RL_POLL_S=0.5)
def test_a_restarted_server_gets_the_current_adapter_again_before_sampling(
    llm_policy, weights_dir, lora_server
):
    job = _job(factories.demo_benchmark(), llm_policy, weights_dir)
    v1_policy = PolicyConfig.objects.create(
        name="v1", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="job-v1"
    )
    PolicyVersion.objects.create(
        job=job, number=1, policy=v1_policy, adapter_path=str(weights_dir), trained_at_step=0
    )
    assert rl_job_advance(job_id=job.pk) == 0.5
    assert lora_server.loads == [{"lora_name": "job-v1", "lora_path": str(weights_dir)}]
    assert _step_batch(job, 0).policy == v1_policy
