"""A real Chromium gets around the episodes: the list's row cursor (j/k, Enter), sorting by a
column header, two rows selected and compared, the viewer's previous/next within the list
and its breadcrumb back to the same filtered page."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import ConsoleWatcher, login
from trajectories.selectors.episode_list import episode_list_queryset

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-browser-123"


def _researcher(page: Any, live_server: Any) -> None:
    user_ensure(username="nina", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "nina", PASSWORD)


def _shown_ids(page: Any) -> list[int]:
    return [int(t.lstrip("#")) for t in page.locator("#episode-rows a.row-link").all_inner_texts()]


def test_list_keys_sorting_selection_and_viewer_neighbours(live_server, page, ran_batch) -> None:
    console = ConsoleWatcher(page)
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/?batch={ran_batch.pk}")
    # The filter panel is folded to one line that names the active filter.
    assert not page.locator("#episode-filters").is_visible()
    assert "Batch # = " in page.locator("#filter-panel summary").inner_text()

    # Sort by reward with the column header: the order is the server's, kept in the URL.
    page.click("th >> text=Reward")
    page.wait_for_load_state("networkidle")
    assert parse_qs(urlsplit(page.url).query)["sort"] == ["reward_desc"]
    filters = {"batch": ran_batch.pk, "sort": "reward_desc"}
    order = list(episode_list_queryset(filters=filters).values_list("pk", flat=True))
    assert _shown_ids(page) == order

    # j/k move the row cursor, Enter opens the row under it.
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    assert page.locator("#episode-rows tr.cursor a.row-link").inner_text() == f"#{order[1]}"
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/episodes/{order[1]}/**")

    # The viewer steps through the same list with ] and [ ...
    page.keyboard.press("]")
    page.wait_for_url(f"**/episodes/{order[2]}/**")
    assert "3 of 4 in this filter" in page.locator(".episode-nav").inner_text()
    page.keyboard.press("[")
    page.wait_for_url(f"**/episodes/{order[1]}/**")
    page.click("#episode-next")
    page.wait_for_url(f"**/episodes/{order[2]}/**")
    # ... and its breadcrumb leads back to the list as it was filtered and sorted.
    page.click("#back-to-list")
    page.wait_for_load_state("networkidle")
    assert parse_qs(urlsplit(page.url).query) == {
        "batch": [str(ran_batch.pk)],
        "sort": ["reward_desc"],
    }
    assert _shown_ids(page) == order

    # Two ticked rows go to the comparison.
    compare = page.locator("#row-actions button[value=compare]")
    assert compare.is_disabled()
    page.check(f"input[name=ids][value='{order[0]}']")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("x")  # ticks the row under the cursor (the second)
    assert "2 selected" in page.locator("#selected-count").inner_text()
    compare.click()
    page.wait_for_url("**/compare/**")
    assert parse_qs(urlsplit(page.url).query) == {"a": [str(order[0])], "b": [str(order[1])]}
    assert console.errors == []
