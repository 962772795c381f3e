"""A real Chromium at a laptop's 1400×1000: the viewer's turn starts above the fold, the
graph's documents carry labels, compare keeps both runs visible where they coincide, and a
deterministic group shows one card for its identical samples."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-layout-123"
FOLD = 1000


def _researcher(page: Any, live_server: Any) -> None:
    page.set_viewport_size({"width": 1400, "height": FOLD})
    user_ensure(username="lena", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "lena", PASSWORD)


def test_the_turn_starts_above_the_fold_and_the_graph_is_labelled(live_server, page, episode):
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/{episode.pk}/")
    turn = page.locator("section.turn.current")
    assert turn.bounding_box()["y"] < FOLD - 200  # its heading and first lines show too
    assert not page.locator(".reward-breakdown dl").is_visible()  # folded
    page.locator(".reward-breakdown summary").click()
    assert page.locator(".reward-breakdown dl").is_visible()

    page.locator("#graph-plot .main-svg").first.wait_for(timeout=10_000)
    labels = page.locator("#graph-plot .scatterlayer .textpoint")
    assert labels.count() > 0 and labels.first.text_content().strip()
    assert "after that turn" in page.locator("#graph-h ~ .legend").inner_text()
    assert page.console_watcher.errors == []


def test_compare_draws_both_runs_where_they_coincide(live_server, page, ran_batch):
    a, b = ran_batch.groups.order_by("pk").first().episodes.order_by("pk")[:2]
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/compare/?a={a.pk}&b={b.pk}")
    page.locator("#compare-plot .main-svg").first.wait_for(timeout=10_000)
    traces = page.locator("#compare-plot .scatterlayer .trace")
    assert traces.count() == 6  # three curves for each side
    styles = page.evaluate(
        "Array.from(document.getElementById('compare-plot').data,"
        " t => [t.name, t.line.width, t.marker.symbol])"
    )
    widths = {name[0]: width for name, width, _ in styles}
    symbols = {name[0]: symbol for name, _, symbol in styles}
    assert widths["A"] > widths["B"] and symbols["A"] != symbols["B"]
    assert page.locator(".compare-head tr.differs").count() == 0  # the same run, twice
    assert page.console_watcher.errors == []


def test_identical_samples_of_a_group_share_one_card(live_server, page, ran_batch):
    group = ran_batch.groups.order_by("pk").first()
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/groups/{group.pk}/")
    assert page.locator("article.sample").count() == 1
    assert "×2 identical" in page.locator("article.sample h2").inner_text()
    assert page.locator("article.sample td.status-bad").count() == 0
    assert page.locator(".zero-variance").is_visible()


def test_at_900_px_a_turn_and_its_curated_set_diff_stay_side_by_side(live_server, page, episode):
    _researcher(page, live_server)
    page.set_viewport_size({"width": 900, "height": 900})
    page.goto(f"{live_server.url}/episodes/{episode.pk}/")
    # The last turn that changed the curated set: the one furthest down the page.
    changed = page.evaluate(
        "Array.from(document.querySelectorAll('.wm-col .per-turn ul.diff'))"
        ".map(d => d.closest('.per-turn').dataset.turn).pop()"
    )
    page.goto(f"{live_server.url}/episodes/{episode.pk}/#turn-{changed}")
    turn = page.locator(f"section.turn[data-turn='{changed}']").bounding_box()
    diff = page.locator(f".wm-col .per-turn[data-turn='{changed}'] ul.diff").bounding_box()
    assert turn is not None and diff is not None
    assert diff["x"] >= turn["x"] + turn["width"] - 1  # beside the turn, not under it
    assert abs(diff["y"] - turn["y"]) < 900, (turn, diff)
    assert page.evaluate("document.documentElement.scrollWidth") <= 900  # no sideways scroll
    assert page.console_watcher.errors == []
