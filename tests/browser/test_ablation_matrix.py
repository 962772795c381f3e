"""A real Chromium launches an ablation matrix from its form, follows it to its page, and
sees the grouped bar charts with error bars there and on the dashboard."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app import queues
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from trajectories.models import AblationMatrix, MatrixStatus
from trajectories.tasks import ablation_matrix_run_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def test_a_matrix_launched_from_the_form_is_plotted(
    live_server: Any, page: Any, monkeypatch: Any
) -> None:
    # No worker here: the task the service queues on commit runs at once instead.
    monkeypatch.setattr(queues, "enqueue", lambda name, pk, **kw: ablation_matrix_run_task(pk))
    factories.demo_benchmark()
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/ablations/new/")
    assert page.locator("input[name=conditions]:checked").count() == 9  # all, by default
    page.select_option("#id_benchmark", label="demo")
    page.fill("#id_runs", "2")
    page.fill("#id_query_limit", "2")
    page.uncheck("input[name=conditions][value=minus_auto_seed]")
    page.click(".form-card button[type=submit]")  # not the header's log-out button
    page.wait_for_load_state("networkidle")
    matrix = AblationMatrix.objects.get()
    assert matrix.status == MatrixStatus.DONE, matrix.error
    assert page.url.endswith(f"/ablations/{matrix.pk}/")
    page.locator("#ablation-chart-recall .main-svg").first.wait_for(timeout=5000)
    # Three recall bars per condition (eight conditions), each with an error bar.
    recall = page.locator("#ablation-chart-recall")
    assert recall.locator(".barlayer .trace").count() == 3
    assert recall.locator(".barlayer .trace").first.locator(".point").count() == 8
    assert recall.locator(".errorbar").count() == 3 * 8
    assert page.locator(".ablation-table tbody tr").count() == 8
    page.goto(f"{live_server.url}/")
    page.locator("#ablation-chart-counts .main-svg").first.wait_for(timeout=5000)
    assert page.locator(f'a[href="/ablations/{matrix.pk}/"]').count() >= 1
    assert page.console_watcher.errors == []
