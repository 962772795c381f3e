"""A real Chromium on the recording-session pages: a session created on the page records
an agent's call made with the key read from the page, and the list counts it."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-browser-123"


def _chat(url: str) -> dict[str, object]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def test_a_session_made_on_the_page_records_a_call(live_server, page, settings):
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/recordings/")
    assert "No recording sessions yet." in page.content()

    page.click("text=New recording session")
    page.fill("#id_name", "browser run")
    page.fill("#id_task", "fix-the-bug")
    page.fill("#id_temperature", "0.6")
    page.click("button:has-text('Create session')")
    key = page.locator("#session-key").inner_text()
    openai_env = page.locator("#env-openai").inner_text()
    assert f"OPENAI_BASE_URL={live_server.url}/proxy/{key}/v1" in openai_env

    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        reply = _chat(f"{live_server.url}/proxy/{key}/v1/chat/completions")
    assert reply["choices"][0]["message"]["content"] == "reply 1"
    chats = [r["body"] for r in fake.requests if "messages" in r.get("body", {})]
    assert chats[-1]["temperature"] == 0.6  # the session's override

    page.goto(f"{live_server.url}/recordings/")
    row = page.locator("#recordings tbody tr").first
    assert row.locator("td.calls").inner_text() == "1"
    assert row.locator("td.state").inner_text() == "open"
    assert key not in page.content()
    shots = os.environ.get("SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/recordings.png")  # the 1400 × 900 viewport

    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button", has_text="Close").click()
    page.wait_for_selector("text=closed; its key stops working")
    assert page.locator("#recordings tbody tr td.state").first.inner_text() == "closed"
    assert not page.console_watcher.errors
