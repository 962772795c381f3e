"""A real Chromium takes a researcher through the pages that used to need the API: a new
policy, then an SFT export of approved episodes, downloaded from its page."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness_app.models import PolicyConfig
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from tests.fakes.openai_server import FakeOpenAIServer
from training.models import SFTExport
from training.services.exports import sft_export_run
from trajectories.services.annotations import annotation_bulk_apply

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def _shot(page: Any, name: str) -> None:
    shots = os.environ.get("SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/{name}.png")  # the 1400 × 900 viewport


def test_a_policy_and_an_export_are_made_from_the_pages(
    live_server: Any, page: Any, demo_benchmark: Any, baseline_policy: Any, tmp_path: Path
) -> None:
    rosa, _ = user_ensure(username="rosa", password=PASSWORD, role=Role.RESEARCHER)
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    annotation_bulk_apply(actor=rosa, filters={"batch": batch.pk}, label="approve")
    login(page, live_server.url, "rosa", PASSWORD)

    page.click("nav >> text=Policies")
    page.click("text=New policy")
    page.fill("#id_name", "qwen-t07")
    page.select_option("#id_kind", "openai")
    with FakeOpenAIServer(model="Qwen/Qwen3-0.6B") as served:  # its /v1/models is asked
        page.fill("#id_base_url", served.base_url)
        page.fill("#id_model", "Qwen3-0.6B")
        page.fill("#id_sampling", '{"temperature": "hot"}')
        page.click("main button[type=submit]")
        assert "temperature must be a number" in page.locator("#sampling-error").inner_text()
        page.fill("#id_sampling", '{"temperature": 0.7, "max_tokens": 1024}')
        page.click("main button[type=submit]")
        assert "it serves: 'Qwen/Qwen3-0.6B'" in page.locator("#model-error").inner_text()
        page.fill("#id_model", "Qwen/Qwen3-0.6B")
        page.click("main button[type=submit]")
        row = page.locator("tr", has_text="qwen-t07")
        assert "temperature=0.7" in row.inner_text()
        policy = PolicyConfig.objects.get(name="qwen-t07")
        assert row.locator("a", has_text="Launch a batch").get_attribute("href") == (
            f"/batches/new/?policy={policy.pk}"
        )
        _shot(page, "policies")

        # Unused, so an edit changes it in place.
        row.locator("a", has_text="Edit").click()
        page.fill("#id_sampling", '{"temperature": 0.5}')
        page.click("main button[type=submit]")
        assert "temperature=0.5" in page.locator("tr", has_text="qwen-t07").inner_text()
        assert PolicyConfig.objects.get(name="qwen-t07").pk == policy.pk
    # The baseline made the batch: it cannot be deleted, and the page says why.
    page.locator(f"#policy-{baseline_policy.pk}").locator("a", has_text="Delete").click()
    assert "used by 1 batch" in page.locator("main").inner_text()
    assert page.locator("main button", has_text="Delete").count() == 0

    page.click("nav >> text=Exports")
    page.click("text=New export")
    page.fill("#id_batch", str(batch.pk))
    page.click("main button[type=submit]")
    export = SFTExport.objects.get()
    sft_export_run(export_id=export.pk)  # what the worker does with the queued task
    page.wait_for_selector("#export-live[data-status=done]")  # the page follows it, no reload
    assert "Done" in page.locator("#export-live .pill").inner_text()
    with page.expect_download() as download:
        page.click("text=Download the JSONL")
    saved = tmp_path / "export.jsonl"
    download.value.save_as(saved)
    assert len(saved.read_text().splitlines()) == 2
    page.click("nav >> text=Exports")
    _shot(page, "exports")
    for width in (900, 1100, 1400):  # the nav wraps rather than widening the page
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.console_watcher.errors == []
