"""A real Chromium watches a batch page while its episodes run (run here by the test, or by a
live Celery worker after a launch from the form): the progress, pace, metrics and groups
refresh without a reload, the last refresh shows the final figures and polling stops;
Cancel asks first."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.test import TestCase

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from trajectories.models import BatchStatus, RolloutBatch
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def _queued_batch(**batch: Any) -> RolloutBatch:
    """A batch whose episodes wait for the test to run them (its enqueue is dropped)."""
    with TestCase.captureOnCommitCallbacks():
        return batch_create(
            benchmark=factories.demo_benchmark(), policy=factories.baseline_policy(), **batch
        )


def _open(page: Any, base_url: str, path: str) -> None:
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, base_url, "rita", PASSWORD)
    page.goto(base_url + path)


def test_the_batch_page_follows_its_episodes_to_the_final_metrics(
    live_server: Any, page: Any
) -> None:
    batch = _queued_batch(query_limit=6, samples_per_query=4)
    _open(page, live_server.url, f"/batches/{batch.pk}/")
    live = page.locator("#batch-live")
    assert live.locator("[data-metric=n]").inner_text() == "0"
    assert page.locator("text=Cancel batch").count() == 1
    # Group by group, so half-way three groups are done and three have not started.
    episodes = list(batch.episodes.order_by("group", "sample_index").values_list("pk", flat=True))
    for episode_id in episodes[:12]:
        episode_run(episode_id=episode_id)
    # The page refreshes itself: half the episodes, a rate and an estimate, without a reload.
    page.locator("#batch-live[data-status=running] [data-metric=n]:text-is('12')").wait_for(
        timeout=6000
    )
    pace = page.locator(".batch-pace").inner_text()
    assert "episodes/min" in pace and "ETA" in pace and "(12 left)" in pace
    assert "0 failed" in pace
    assert page.locator(".batch-groups .pill.status-completed").count() == 3
    assert page.locator(".batch-groups .pill.status-queued").count() == 3
    shots = os.environ.get("SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/batch-live.png")  # the 1400 × 900 viewport
    for episode_id in episodes[12:]:
        episode_run(episode_id=episode_id)
    page.locator("#batch-live[data-status=completed]").wait_for(timeout=6000)
    assert live.locator("[data-metric=n]").inner_text() == "24"
    assert page.locator(".batch-groups .pill.status-completed").count() == 6
    assert page.locator(".batch-groups td.num:text-is('4/4')").count() == 6
    assert page.locator("text=Cancel batch").count() == 0
    assert "24 of 24 episodes finished" in live.inner_text()
    # Polling stopped with that last refresh.
    polls: list[str] = []
    page.on("request", lambda request: "/progress/" in request.url and polls.append(request.url))
    page.wait_for_timeout(2600)
    assert polls == []
    assert page.console_watcher.errors == []


def test_cancel_asks_before_it_cancels(live_server: Any, page: Any) -> None:
    batch = _queued_batch(query_limit=2, samples_per_query=2)
    _open(page, live_server.url, f"/batches/{batch.pk}/")
    questions: list[str] = []

    def answer(dialog: Any, accept: bool) -> None:
        questions.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, accept=False))
    page.click("text=Cancel batch")
    page.wait_for_timeout(300)
    batch.refresh_from_db()
    assert batch.status == BatchStatus.QUEUED
    assert questions == [f"Cancel batch {batch.pk}? Its 4 unfinished episodes will not complete."]
    page.once("dialog", lambda dialog: answer(dialog, accept=True))
    page.click("text=Cancel batch")
    page.wait_for_load_state("networkidle")
    batch.refresh_from_db()
    assert batch.status == BatchStatus.CANCELLED
    assert page.locator("#batch-live[data-status=cancelled]").count() == 1
    assert "4 cancelled" in page.locator(".batch-pace").inner_text()
    assert page.console_watcher.errors == []


def test_a_batch_launched_from_the_form_runs_on_a_worker_while_its_page_follows(
    live_server: Any, page: Any, live_worker: Any
) -> None:
    benchmark = factories.demo_benchmark()
    factories.baseline_policy()
    _open(page, live_server.url, f"/benchmarks/{benchmark.pk}/")
    page.click("text=Launch a batch")
    page.fill("#id_samples_per_query", "2")
    page.fill("#id_query_limit", "3")
    page.click(".form-card button[type=submit]")
    page.wait_for_url("**/batches/*/")
    batch = RolloutBatch.objects.get()
    # No reload from here: the worker runs the six episodes and the page follows them.
    page.locator("#batch-live[data-status=completed]").wait_for(timeout=90_000)
    assert page.locator("[data-metric=n]").inner_text() == "6", live_worker.log()[-3000:]
    assert page.locator(".batch-groups .pill.status-completed").count() == 3
    assert page.locator("text=Cancel batch").count() == 0
    assert page.url.endswith(f"/batches/{batch.pk}/")
    assert page.console_watcher.errors == []
