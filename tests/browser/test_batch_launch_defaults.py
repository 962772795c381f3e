"""A real Chromium on the batch launch form: samples per query follow the chosen policy,
1 for a deterministic one and 4 otherwise, until the researcher types a value."""

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


def test_samples_per_query_follow_the_policy_until_typed(live_server: Any, page: Any) -> None:
    factories.demo_benchmark()
    baseline = factories.baseline_policy()
    sampled = PolicyConfig.objects.create(
        name="sampled", kind=PolicyKind.OPENAI, sampling={"temperature": 0.8}
    )
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/batches/new/")
    samples, warning = page.locator("#id_samples_per_query"), page.locator("#samples-warning")
    assert samples.input_value() == "4"  # nothing chosen among two policies

    page.select_option("#id_policy", str(baseline.pk))
    assert samples.input_value() == "1" and warning.is_hidden()
    page.select_option("#id_policy", str(sampled.pk))
    assert samples.input_value() == "4"

    page.fill("#id_samples_per_query", "3")
    page.select_option("#id_policy", str(baseline.pk))
    assert samples.input_value() == "3"  # typed: left alone, and warned about
    assert warning.is_visible()
    assert page.console_watcher.errors == []
