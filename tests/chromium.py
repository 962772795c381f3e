"""Browser tests drive Debian's Chromium through Playwright against pytest-django's live server.

They skip, saying why, when no Chromium is installed. Playwright's sync API runs an event
loop in the test thread, so Django's async-safety guard must be told the ORM calls the
tests make there (creating users) are fine.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def _chromium_path() -> str | None:
    override = os.environ.get("CHROMIUM_PATH")
    if override:
        return override
    for candidate in CHROMIUM_CANDIDATES:
        if os.path.exists(candidate):
            return candidate
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    path = _chromium_path()
    if path is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set CHROMIUM_PATH)")
    playwright_api = pytest.importorskip("playwright.sync_api")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with playwright_api.sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=path, headless=True, args=LAUNCH_ARGS)
        yield instance
        instance.close()


class ConsoleWatcher:
    """Collects console errors and uncaught page errors so a test can assert there were none."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.console_watcher = ConsoleWatcher(page)
    yield page
    context.close()


def login(page: Any, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
