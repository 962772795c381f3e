"""Debian's Chromium for the browser tests, which drive it through Playwright against
pytest-django's live server: where it is, how it starts, and logging in to a page.

The `browser` and `page` fixtures (tests/conftest.py) skip, saying why, when no Chromium is
installed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def chromium_path() -> str | None:
    override = os.environ.get("CHROMIUM_PATH")
    if override:
        return override
    for candidate in CHROMIUM_CANDIDATES:
        if os.path.exists(candidate):
            return candidate
    return shutil.which("chromium")


class ConsoleWatcher:
    """Collects console errors and uncaught page errors so a test can assert there were none."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))


def login(page: Any, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
