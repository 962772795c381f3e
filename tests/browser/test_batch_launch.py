"""A real Chromium on the batch launch form, reached from a benchmark's page: the benchmark
and the only policy come chosen, and the deterministic-policy warning follows the fields."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def test_the_launch_form_warns_live_about_repeated_deterministic_samples(
    live_server: Any, page: Any
) -> None:
    benchmark, baseline = factories.demo_benchmark(), factories.baseline_policy()
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/benchmarks/{benchmark.pk}/")
    page.click("text=Launch a batch")
    page.wait_for_load_state("networkidle")
    assert page.locator("#id_benchmark").input_value() == str(benchmark.pk)
    assert page.locator("#id_policy").input_value() == str(baseline.pk)
    warning = page.locator("#samples-warning")
    assert warning.is_hidden()  # the baseline: 1 sample per query by default
    page.fill("#id_samples_per_query", "3")
    assert warning.is_visible()
    page.fill("#id_samples_per_query", "1")
    assert warning.is_hidden()
    assert page.console_watcher.errors == []


def test_a_sampled_policy_is_not_warned_about(live_server: Any, page: Any) -> None:
    factories.demo_benchmark()
    factories.baseline_policy()
    sampled = PolicyConfig.objects.create(name="sampled", kind=PolicyKind.OPENAI)
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/batches/new/")
    warning = page.locator("#samples-warning")
    assert warning.is_hidden()  # nothing chosen among two policies
    page.select_option("#id_policy", str(sampled.pk))
    assert warning.is_hidden()
    page.select_option("#id_policy", label="baseline")
    assert warning.is_hidden()  # its default, 1 sample per query, came with it
    page.fill("#id_samples_per_query", "2")
    assert warning.is_visible()
    assert page.console_watcher.errors == []
