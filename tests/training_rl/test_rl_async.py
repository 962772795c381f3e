"""RL jobs in async mode, and adapters published to every vLLM replica.

The trainer is stood in for (`_train` returns a saved-looking adapter after a short
sleep) so the tests see the order of the pieces: in async mode step n+1's rollouts exist
before step n's training ends, and train one version stale. The adapter endpoints are
the project's fake server, two of them where there are replicas."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer
from tests.training_rl.jobs import job_create, rollouts_finish, step_batch
from tests.training_rl.test_rl_job_pages import _launch_data
from training import selectors
from training.models import PolicyVersion, RLJob, RLJobStatus, RLMode, RLStepStatus
from training.rl.publish import PublishError, adapters_serve
from training.services import rl_jobs
from training.services.rl_jobs import RLJobError, rl_job_advance
from trajectories.models import BatchStatus

pytestmark = pytest.mark.django_db

TRAIN_S = 0.05


@pytest.fixture
def trainings(monkeypatch, weights_dir) -> list[dict[str, Any]]:
    """Each stand-in training: what the job looked like when it started."""
    seen: list[dict[str, Any]] = []

    def train(job, step, version, build, timings):
        following = job.step_rows.filter(index=step.index + 1).select_related("batch").first()
        seen.append(
            {
                "step": step.index,
                "sampled": step.version.number,
                "trainer": version.number,
                "next_batch": following.batch.status if following else None,
                "next_sampled": following.version.number if following else None,
            }
        )
        time.sleep(TRAIN_S)
        number = version.number + 1
        timings["train_s"] = TRAIN_S
        return rl_jobs.Trained(number, f"rl-job-{job.pk}-v{number}", weights_dir, {}, None)

    monkeypatch.setattr(rl_jobs, "_train", train)
    monkeypatch.setattr(rl_jobs, "_trainer_keep", lambda key, trainer: None)
    return seen


def run_job(job: RLJob) -> None:
    """Advance the job to its end, playing each step's rollouts on paper when asked."""
    for _ in range(20):
        job.refresh_from_db()
        if job.is_finished:
            return
        step = job.step_rows.filter(index=job.steps_done).first()
        if step is not None and step.batch.status == BatchStatus.QUEUED:
            rollouts_finish(step.batch, [1.0, 0.0, 0.0, 1.0])
        rl_job_advance(job_id=job.pk)
    raise AssertionError("the job did not finish")


def test_async_mode_starts_the_next_rollouts_before_training_and_trains_one_version_stale(
    llm_policy, weights_dir, trainings, lora_server
):
    job = job_create(
        factories.demo_benchmark(), llm_policy, weights_dir, steps=3, mode=RLMode.ASYNC
    )
    run_job(job)
    job.refresh_from_db()
    assert job.status == RLJobStatus.COMPLETED and job.mode == "async"
    # Step n+1's batch was queued (on the version step n sampled) while step n trained.
    assert trainings == [
        {"step": 0, "sampled": 0, "trainer": 0, "next_batch": "queued", "next_sampled": 0},
        {"step": 1, "sampled": 0, "trainer": 1, "next_batch": "queued", "next_sampled": 1},
        {"step": 2, "sampled": 1, "trainer": 2, "next_batch": None, "next_sampled": None},
    ]
    steps = list(job.step_rows.order_by("index"))
    assert [s.metrics["staleness"] for s in steps] == [0, 1, 1]
    assert [s.produced.number for s in steps] == [1, 2, 3]
    # Each episode names the version it sampled (the step's), one behind its trainer.
    assert [step_batch(job, i).policy.model for i in range(3)] == [
        "smollm2",
        "smollm2",
        f"rl-job-{job.pk}-v1",
    ]
    overlaps, idle = selectors.job_step_timing(steps)
    assert overlaps[0] > 0 and overlaps[1] > 0  # step n trained while n+1 sampled
    assert idle is not None and idle.overlap_s > 0


def test_sync_mode_samples_each_step_after_the_previous_trained(
    llm_policy, weights_dir, trainings, lora_server
):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir, steps=3)
    run_job(job)
    assert [t["next_batch"] for t in trainings] == [None, None, None]
    assert [(t["sampled"], t["trainer"]) for t in trainings] == [(0, 0), (1, 1), (2, 2)]
    steps = list(job.step_rows.order_by("index"))
    assert [s.metrics["staleness"] for s in steps] == [0, 0, 0]
    overlaps, idle = selectors.job_step_timing(steps)
    assert overlaps == {0: 0.0, 1: 0.0}
    assert idle is not None and idle.overlap_s == 0.0


def test_the_job_page_shows_the_overlap_and_the_idle_fractions(
    researcher_client, llm_policy, weights_dir, trainings, lora_server
):
    job = job_create(
        factories.demo_benchmark(), llm_policy, weights_dir, steps=2, mode=RLMode.ASYNC
    )
    run_job(job)
    page = researcher_client.get(f"/training/rl/{job.pk}/").content.decode()
    assert "Overlap (s)" in page
    assert 'id="idle-fractions"' in page and "(async mode)" in page


def test_cancelling_an_async_job_cancels_both_running_batches(
    llm_policy, weights_dir, trainings, lora_server
):
    job = job_create(
        factories.demo_benchmark(), llm_policy, weights_dir, steps=3, mode=RLMode.ASYNC
    )
    rl_job_advance(job_id=job.pk)
    rollouts_finish(step_batch(job, 0), [1.0, 0.0, 0.0, 1.0])
    rl_job_advance(job_id=job.pk)  # trains step 0; step 1's rollouts run
    rl_job_advance(job_id=job.pk)
    assert step_batch(job, 1).status == BatchStatus.QUEUED
    assert rl_jobs.rl_job_cancel(job=job) is True
    assert step_batch(job, 1).status == BatchStatus.CANCELLED


def test_an_unknown_mode_is_refused_naming_the_field(llm_policy, weights_dir):
    with pytest.raises(RLJobError, match=r"mode 'later' is not one of \['sync', 'async'\]"):
        job_create(factories.demo_benchmark(), llm_policy, weights_dir, mode="later")
    assert not RLJob.objects.exists()


def test_the_api_and_the_form_launch_an_async_job(researcher_client, llm_policy, weights_dir):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    data = _launch_data(llm_policy, weights_dir, mode="async")
    response = api.post("/api/rl-jobs/", {**data, "reward_weights": {}}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["mode"] == "async"
    response = api.post("/api/rl-jobs/", {**data, "reward_weights": {}, "mode": "x"}, format="json")
    assert response.status_code == 400 and "mode" in response.json()

    assert 'name="mode"' in researcher_client.get("/training/rl/new/").content.decode()
    assert researcher_client.post("/training/rl/new/", data).status_code == 302
    assert RLJob.objects.order_by("-pk").first().mode == RLMode.ASYNC


# --- replicas ----------------------------------------------------------------------------------


@pytest.fixture
def two_replicas(settings):
    with FakeOpenAIServer(model="smollm2") as a, FakeOpenAIServer(model="smollm2") as b:
        settings.VLLM_BASE_URLS = [a.base_url, b.base_url]
        settings.VLLM_BASE_URL = a.base_url
        yield a, b


def test_a_trained_version_is_served_by_every_replica(
    two_replicas, weights_dir, trainings, settings
):
    a, b = two_replicas
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=a.base_url, model="smollm2"
    )
    job = job_create(factories.demo_benchmark(), policy, weights_dir, steps=1)
    run_job(job)
    loaded = [{"lora_name": f"rl-job-{job.pk}-v1", "lora_path": str(weights_dir)}]
    assert a.loads == loaded and b.loads == loaded


def test_a_restarted_replica_gets_the_current_adapter_again(two_replicas, weights_dir):
    a, b = two_replicas
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url="", model="smollm2"
    )
    job = job_create(factories.demo_benchmark(), policy, weights_dir)
    v1 = PolicyConfig.objects.create(name="v1", kind=PolicyKind.OPENAI, model="job-v1")
    PolicyVersion.objects.create(
        job=job, number=1, policy=v1, adapter_path=str(weights_dir), trained_at_step=0
    )
    a.models.add("job-v1")  # a kept it; b was restarted and forgot it
    rl_job_advance(job_id=job.pk)
    assert a.loads == [] and [load["lora_name"] for load in b.loads] == ["job-v1"]


def test_a_replica_that_refuses_the_adapter_fails_the_step_naming_it(
    two_replicas, weights_dir, trainings
):
    a, b = two_replicas
    b.refuse = {"load_lora_adapter": 500}
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=a.base_url, model="smollm2"
    )
    job = job_create(factories.demo_benchmark(), policy, weights_dir, steps=2)
    rl_job_advance(job_id=job.pk)
    rollouts_finish(step_batch(job, 0), [1.0, 0.0, 0.0, 1.0])
    assert rl_job_advance(job_id=job.pk) is None
    job.refresh_from_db()
    assert job.status == RLJobStatus.FAILED
    assert job.error.startswith("1 of 2 replicas did not serve the adapter (1 did)")
    assert f"{b.base_url}/load_lora_adapter answered 500" in job.error
    assert job.step_rows.get().status == RLStepStatus.FAILED


def test_publishing_tries_every_replica_before_failing(weights_dir: Path):
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        urls = ["http://127.0.0.1:9/v1", a.base_url, b.base_url]
        with pytest.raises(PublishError, match=r"1 of 3 replicas .* \(2 did\): http://127.0.0.1:9"):
            adapters_serve(urls, name="x", path=weights_dir)
        assert a.loads and b.loads
