"""A real Chromium opens an SFT job: its loss curves draw, with no console errors."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login
from training.models import ExportStatus, SFTExport, SFTJob, SFTJobStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def _finished_job() -> SFTJob:
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url="http://127.0.0.1:9/v1", model="smollm2"
    )
    export = SFTExport.objects.create(status=ExportStatus.DONE, episodes=2, records=2)
    history = [
        {"step": 0, "epoch": 0.0, "loss": None, "eval_loss": 2.5, "learning_rate": None},
        {"step": 1, "epoch": 1.0, "loss": 2.0, "eval_loss": None, "learning_rate": 1e-4},
        {"step": 2, "epoch": 2.0, "loss": 1.5, "eval_loss": None, "learning_rate": 1e-4},
        {"step": 3, "epoch": 3.0, "loss": 1.0, "eval_loss": 1.25, "learning_rate": 1e-4},
    ]
    return SFTJob.objects.create(
        name="<b>three epochs</b>",
        export=export,
        base_policy=policy,
        base_model_dir="/nowhere",
        status=SFTJobStatus.COMPLETED,
        step=3,
        total_steps=3,
        history=history,
        metrics={"eval_loss_before": 2.5, "eval_loss_after": 1.25},
        manifest={"input": "recorded_tokens"},
        finished_at=timezone.now(),
    )


def test_an_sft_job_page_draws_its_loss_curves(live_server: Any, page: Any) -> None:
    job = _finished_job()
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/training/sft/{job.pk}/")
    for chart in ("loss", "lr"):
        page.locator(f"#sft-chart-{chart} .main-svg").first.wait_for(timeout=5000)
    traces = page.locator("#sft-chart-loss .scatterlayer .trace")
    assert traces.count() == 2  # train and eval loss
    assert traces.nth(0).locator(".point").count() == 3  # steps 1 to 3 have a train loss
    assert traces.nth(1).locator(".point").count() == 2  # eval before step 1 and at the end
    assert page.locator("h1").inner_text() == "<b>three epochs</b>"
    assert "step 3 of 3" in page.locator("#sft-job-progress").inner_text()
    assert page.console_watcher.errors == []
