"""/api/docs/ in a real Chromium, for each role: Swagger UI starts under the site's
Content-Security-Policy (script-src 'self', no inline script) and lists the operations."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-docs-123"
KNOWN_PATHS = ("/api/batches/", "/api/episodes/", "/api/exports/", "/api/sft-jobs/")


@pytest.mark.parametrize("role", [Role.RESEARCHER, Role.ANNOTATOR])
def test_the_api_docs_list_the_operations_under_the_csp(
    live_server: Any, page: Any, role: Role
) -> None:
    user_ensure(username="doc-reader", password=PASSWORD, role=role)
    login(page, live_server.url, "doc-reader", PASSWORD)

    response = page.goto(f"{live_server.url}/api/docs/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_selector(".opblock-summary-path", timeout=15_000)
    paths = page.locator(".opblock-summary-path").evaluate_all(
        "nodes => nodes.map(node => node.getAttribute('data-path'))"
    )
    assert set(KNOWN_PATHS) <= set(paths)
    assert "Harness workbench API" in page.locator(".info .title").inner_text()
    assert page.console_watcher.errors == []
