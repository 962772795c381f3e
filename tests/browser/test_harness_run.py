"""A real Chromium on a harness run's page: the token strips load as the calls scroll into
view, the evaluation and the CLI's output are shown, and no script error happens."""

from __future__ import annotations

import os

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-browser-123"


def test_a_run_page_loads_its_token_strips(live_server, page, tmp_path):
    group = factories.harness_group_finished([1.0, 0.0])
    run = group.runs.get(index=0)
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)

    page.goto(f"{live_server.url}/harness/runs/{run.pk}/")
    first = page.locator(f"#call-{run.session.episode.model_calls.order_by('pk').first().pk}")
    first.scroll_into_view_if_needed()  # strips load when revealed
    first.locator(".strip .tok").first.wait_for(timeout=5000)
    assert first.locator(".tok.masked").count() > 0 and first.locator(".tok.lp1").count() > 0
    assert "reward: 1.0" in page.locator("#eval-h + p + pre").inner_text()
    assert page.locator("h1").inner_text().startswith("Run 0 of group")
    shots = os.environ.get("SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/harness-run.png", full_page=True)
        page.goto(f"{live_server.url}/harness/groups/{group.pk}/")
        page.screenshot(path=f"{shots}/harness-group.png", full_page=True)
    assert not page.console_watcher.errors
