"""A real Chromium draws the dashboard's recall charts: one bar per experiment and ablation,
each with its error bar and its n."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def test_the_recall_charts_have_error_bars_and_n(live_server: Any, page: Any) -> None:
    benchmark, policy = factories.demo_benchmark(), factories.baseline_policy()
    factories.batch_played(benchmark, policy, query_limit=2, samples_per_query=2)
    factories.batch_played(
        benchmark, policy, query_limit=2, samples_per_query=3, max_turns=3,
        termination_policy="last_tool",
    )  # fmt: skip
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/")
    chart = page.locator("#chart-curated_recall")
    chart.locator(".main-svg").first.wait_for(timeout=5000)
    # Two experiments (40-turn max_turns, 3-turn last_tool) of one ablation: two bars.
    assert chart.locator(".barlayer .point").count() == 2
    assert chart.locator(".errorbar").count() == 2
    assert sorted(chart.locator(".barlayer text").all_text_contents()) == ["n=4", "n=6"]
    assert page.locator(".ablation-table tbody tr").count() == 2
    assert page.console_watcher.errors == []
