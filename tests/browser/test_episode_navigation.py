"""A real Chromium gets around the episodes: the list's row cursor (j/k, Enter), sorting by a
column header, two rows selected and compared (only two runs of one query; two queries of
one evaluation run go to its paired comparison), the viewer's previous/next within the list
and its breadcrumb back to the same filtered page."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import TestCase

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import ConsoleWatcher, login
from trajectories.models import Episode
from trajectories.selectors.episode_list import episode_list_queryset
from trajectories.services.evaluations import evaluation_create

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


def _tick(page: Any, *episodes: Any) -> None:
    ticked = page.locator("#episode-rows input[name=ids]:checked")
    while ticked.count():
        ticked.first.uncheck()
    for episode in episodes:
        page.check(f"input[name=ids][value='{episode.pk}']")


def test_compare_is_offered_for_two_runs_of_one_query_only(live_server, page, ran_batch) -> None:
    first, second = ran_batch.groups.order_by("pk")[:2]
    one, same_query = first.episodes.order_by("pk")[:2]
    other_query = second.episodes.order_by("pk").first()
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/?batch={ran_batch.pk}")
    compare = page.locator("#row-actions button[value=compare]")

    _tick(page, one, other_query)
    assert compare.is_disabled()
    said = page.locator("#selected-count").inner_text()
    assert "different queries" in said and "evaluation run" in said, said
    _tick(page, one, same_query)
    assert compare.is_enabled() and compare.inner_text() == "Compare"
    compare.click()
    page.wait_for_url("**/compare/**")
    assert page.locator(".error").count() == 0

    # A hand-made selection of two queries (or one sent without scripts) comes back to the
    # list with the reason, not to a 400 page.
    response = page.goto(
        f"{live_server.url}/episodes/selection/?action=compare&ids={one.pk}&ids={other_query.pk}"
        f"&from=batch%3D{ran_batch.pk}"
    )
    assert response is not None and response.status == 200
    assert parse_qs(urlsplit(page.url).query) == {"batch": [str(ran_batch.pk)]}
    assert "different queries" in page.locator(".messages").inner_text()
    assert page.console_watcher.errors == []


def test_two_queries_of_one_evaluation_run_are_compared_there(live_server, page) -> None:
    benchmark, a_policy = factories.demo_benchmark(), factories.baseline_policy()
    b_policy = PolicyConfig.objects.create(name="baseline-b", kind=PolicyKind.BASELINE)
    with TestCase.captureOnCommitCallbacks():  # nothing is queued
        evaluation = evaluation_create(
            benchmarks=[benchmark], policies=[a_policy, b_policy], runs=1, query_limit=2
        )
    episodes = Episode.objects.filter(batch__evaluation=evaluation)
    mine = episodes.filter(batch__policy=a_policy).order_by("query_id")[0]
    theirs = episodes.filter(batch__policy=b_policy).order_by("-query_id")[0]
    assert mine.query_id != theirs.query_id  # the run's two queries, one from each side
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/?ids={mine.pk},{theirs.pk}")
    _tick(page, mine, theirs)
    compare = page.locator("#row-actions button[value=compare]")
    assert compare.is_enabled()
    assert compare.inner_text() == f"Compare in evaluation run {evaluation.pk}"
    compare.click()
    page.wait_for_url(f"**/evaluations/{evaluation.pk}/**")
    chosen = {page.locator(f"select[name={side}]").input_value() for side in "ab"}
    assert chosen == {f"{a_policy.pk}:full", f"{b_policy.pk}:full"}
    assert page.locator("select[name=benchmark]").input_value() == str(benchmark.pk)
    assert page.console_watcher.errors == []


def _right_edge(page: Any, header: str) -> float:
    box = page.locator("#episode-rows thead th", has_text=header).bounding_box()
    assert box is not None, f"the {header} column is not shown"
    return box["x"] + box["width"]


def test_chosen_columns_bring_the_metrics_into_view_and_are_kept(
    live_server, page, ran_batch
) -> None:
    _researcher(page, live_server)
    page.set_viewport_size({"width": 900, "height": 900})
    page.goto(f"{live_server.url}/episodes/?batch={ran_batch.pk}")
    assert _right_edge(page, "Reward") > 900  # off-screen with every column shown

    chooser = page.locator("#column-chooser")
    chooser.locator("summary").click()
    for name in ("Query", "Batch", "Policy · ablation"):
        chooser.get_by_label(name, exact=True).uncheck()
    assert page.locator("#episode-rows td.query-cell").first.is_hidden()
    assert _right_edge(page, "Annotation") <= 900  # every metric on screen, and the last column

    page.reload()
    assert page.locator("#episode-rows td.query-cell").first.is_hidden()
    assert _right_edge(page, "Annotation") <= 900
    page.locator("#column-chooser summary").click()
    assert not chooser.get_by_label("Query", exact=True).is_checked()
    chooser.get_by_label("Query", exact=True).check()
    assert page.locator("#episode-rows td.query-cell").first.is_visible()
    assert page.console_watcher.errors == []
