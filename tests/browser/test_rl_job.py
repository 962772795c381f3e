"""A real Chromium opens an RL job: its training curves draw, with no console errors."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from training.models import PolicyVersion, RLJob, RLJobStatus, RLStep, RLStepStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def _finished_job() -> RLJob:
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url="http://127.0.0.1:9/v1", model="smollm2"
    )
    job = RLJob.objects.create(
        name="<b>two steps</b>",
        benchmark=factories.demo_benchmark(),
        base_policy=policy,
        base_model_dir="/nowhere",
        steps=2,
        steps_done=2,
        status=RLJobStatus.COMPLETED,
        finished_at=timezone.now(),
    )
    v0 = PolicyVersion.objects.create(job=job, number=0, policy=policy)
    for index, reward in enumerate([0.1, 0.3]):
        RLStep.objects.create(
            job=job,
            index=index,
            version=v0,
            status=RLStepStatus.DONE,
            metrics={
                "reward_mean": reward,
                "reward_components": {"f_beta": reward / 2, "diversity": 0.1},
                "curated_recall": reward,
                "trajectory_recall": 0.5,
                "final_answer_recall": reward / 3,
                "kept_fraction": 0.5 + index / 4,
                "kept_groups": 1,
                "dropped_groups": 1,
                "logprob_gap": 6e-6,
                "logprob_gap_max": 4e-5,
                "loss": 0.01,
            },
            timings={"rollout_s": 30.0, "train_s": 6.0, "publish_s": 0.05},
            finished_at=timezone.now(),
        )
    return job


def test_an_rl_job_page_draws_its_training_curves(live_server: Any, page: Any) -> None:
    job = _finished_job()
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/training/rl/{job.pk}/")
    for chart in ("reward", "recall", "groups", "gap"):
        page.locator(f"#rl-chart-{chart} .main-svg").first.wait_for(timeout=5000)
    # Two steps, so two points on the reward line; the job's name is text, not markup.
    assert (
        page.locator("#rl-chart-reward .scatterlayer .trace").first.locator(".point").count() == 2
    )
    assert page.locator("h1").inner_text() == "<b>two steps</b>"
    assert page.locator("#rl-job-progress").inner_text().count("2 of 2 steps done") == 1
    assert page.console_watcher.errors == []
