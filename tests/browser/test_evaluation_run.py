"""A real Chromium launches an evaluation run of two configurations x 3 runs from its form,
reads its table, picks a paired comparison and sees the transfer table's chart."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app import queues
from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from trajectories.models import EvaluationRun, EvaluationStatus
from trajectories.rollout import episode_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def test_an_evaluation_run_launched_from_the_form_is_tabled_compared_and_plotted(
    live_server: Any, page: Any, monkeypatch: Any
) -> None:
    # No worker here: each episode the service queues on commit runs at once instead.
    monkeypatch.setattr(queues, "enqueue", lambda name, pk, **kw: episode_run(episode_id=pk))
    benchmark = factories.demo_benchmark()
    factories.baseline_policy()
    PolicyConfig.objects.create(name="baseline-b", kind=PolicyKind.BASELINE)
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/evaluations/new/")
    assert page.input_value("#id_runs") == "3"
    page.check(f"input[name=benchmarks][value='{benchmark.pk}']")
    for policy in PolicyConfig.objects.all():
        page.check(f"input[name=policies][value='{policy.pk}']")
    page.fill("#id_query_limit", "2")
    page.click(".form-card button[type=submit]")
    page.wait_for_load_state("networkidle")
    evaluation = EvaluationRun.objects.get()
    assert evaluation.status == EvaluationStatus.DONE
    assert page.url.endswith(f"/evaluations/{evaluation.pk}/")
    rows = page.locator(".evaluation-table tbody tr")
    assert rows.count() == 2
    assert rows.first.locator("td").nth(2).inner_text() == "3"  # runs
    page.click("#compare button[type=submit]")
    page.wait_for_load_state("networkidle")
    result = page.locator("#compare-result").inner_text()
    assert "over 2 paired queries" in result and "95% CI" in result
    page.locator("#transfer-chart-transfer .main-svg").first.wait_for(timeout=5000)
    chart = page.locator("#transfer-chart-transfer")
    assert chart.locator(".barlayer .trace").count() == 2  # one bar per configuration
    assert chart.locator(".errorbar").count() == 2
    assert page.console_watcher.errors == []
