"""SFT exports in a real Chromium: ticked rows of the episode list become an export whose
form counts what it would take before it is submitted (and refuses none, naming the filter
that emptied it), and the export's page follows its progress without a reload."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from training.models import SFTExport
from training.services.exports import sft_export_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-exports-123"


def _shows(page: Any, selector: str, text: str) -> None:
    """Wait for the count htmx fetches as the form changes."""
    page.wait_for_function(
        "([s, t]) => document.querySelector(s)?.textContent === t", arg=[selector, text]
    )


def _count(page: Any, expected: str) -> None:
    _shows(page, "#export-count", expected)


def test_ticked_episodes_are_counted_exported_and_followed_live(
    live_server: Any, page: Any, demo_benchmark: Any, baseline_policy: Any
) -> None:
    user_ensure(username="rosa", password=PASSWORD, role=Role.RESEARCHER)
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)  # not labelled
    first, second = batch.episodes.order_by("pk").values_list("pk", flat=True)
    login(page, live_server.url, "rosa", PASSWORD)

    page.goto(f"{live_server.url}/episodes/?batch={batch.pk}")
    page.check(f"input[name=ids][value='{first}']")
    page.check(f"input[name=ids][value='{second}']")
    page.click("#row-actions button[value=export]")
    page.wait_for_url("**/training/exports/new/**")
    # Chosen by hand: both are counted, and the form says "approved only" is off.
    _count(page, "2")
    preview = page.locator("#export-preview")
    assert "Approved only is off" in preview.inner_text()
    assert "By annotation status: Not annotated 2" in preview.inner_text()
    # Asking for approved ones empties it, and the count says which filter did.
    page.select_option("#id_annotation_status", "approved")
    _shows(
        page,
        "#export-empty",
        "0 episodes: 2 episodes match ids (2 chosen), but none of them matches "
        "annotation_status=approved.",
    )
    assert page.locator("#export-count").inner_text() == "0"
    page.select_option("#id_annotation_status", "")
    _count(page, "2")

    progress_calls: list[str] = []

    def note_progress_call(request: Any) -> None:
        if "/progress/" in request.url:
            progress_calls.append(request.url)

    page.on("request", note_progress_call)
    page.click("main button[type=submit]")
    page.wait_for_url("**/training/exports/*/")
    export = SFTExport.objects.get()
    live = page.locator("#export-live")
    assert "Queued" in live.inner_text() and "2 episodes match" in live.inner_text()
    assert page.locator("text=Download the JSONL").count() == 0

    sft_export_run(export_id=export.pk)  # what the worker does; the page is not reloaded
    page.wait_for_selector("#export-live[data-status=done]", timeout=10_000)
    assert page.locator("#export-episodes").inner_text() == "2"
    assert page.locator("text=Download the JSONL").is_visible()
    polls = len(progress_calls)
    assert polls >= 1
    time.sleep(4.5)  # two polling periods: a finished export is asked for no more
    assert len(progress_calls) == polls
    assert page.console_watcher.errors == []


def test_the_default_form_refuses_an_export_of_no_approved_episode(
    live_server: Any, page: Any, demo_benchmark: Any, baseline_policy: Any
) -> None:
    user_ensure(username="rosa", password=PASSWORD, role=Role.RESEARCHER)
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)  # not labelled
    login(page, live_server.url, "rosa", PASSWORD)

    page.goto(f"{live_server.url}/training/exports/new/")
    page.fill("#id_batch", str(batch.pk))
    reason = (
        f"0 episodes: 2 episodes match batch={batch.pk}, but none of them matches "
        "annotation_status=approved (approved only: the default without an annotation status)"
    )
    _shows(page, "#export-empty", f"{reason}.")
    assert page.locator("#export-count").inner_text() == "0"
    page.click("main button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert reason in page.locator("main .error").first.inner_text()
    assert not SFTExport.objects.exists()
    assert page.console_watcher.errors == []
