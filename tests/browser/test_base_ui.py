"""A real Chromium logs in and sees the base UI with plotly.js and htmx loaded offline."""

from __future__ import annotations

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login_shows_dashboard_with_scripts_loaded(live_server, page) -> None:
    user_ensure(username="rita", password="pw-rita-123", role=Role.RESEARCHER)
    page.goto(live_server.url + "/")
    assert "/login/" in page.url  # a login is required before anything else
    login(page, live_server.url, "rita", "pw-rita-123")
    assert page.locator("h1").inner_text() == "Dashboard"
    assert page.evaluate("typeof Plotly !== 'undefined' && typeof htmx !== 'undefined'")
    assert page.console_watcher.errors == []


def test_wrong_password_says_so(live_server, page) -> None:
    user_ensure(username="rita", password="pw-rita-123", role=Role.RESEARCHER)
    login(page, live_server.url, "rita", "not-the-password")
    assert "did not match" in page.locator("[role=alert]").inner_text()


def test_dark_mode_toggle_is_remembered(live_server, page) -> None:
    user_ensure(username="rita", password="pw-rita-123", role=Role.ANNOTATOR)
    login(page, live_server.url, "rita", "pw-rita-123")
    page.click("#theme-toggle")
    theme = page.evaluate("document.documentElement.dataset.theme")
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == theme
    assert theme in {"dark", "light"}
