"""A real Chromium drives the researcher pages: the episode viewer turn by turn, its graph
and charts, the filters' permalink, hostile text, and the launch form's role check."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login
from trajectories.models import Episode, Turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-browser-123"


def _researcher(page: Any, live_server: Any) -> None:
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)


def _dialogs(page: Any) -> list[str]:
    """Every alert/confirm/prompt the page opens; a script injected by data would open one."""
    opened: list[str] = []

    def seen(dialog: Any) -> None:
        opened.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    return opened


def _visible_turn(page: Any) -> int:
    return int(page.locator("section.turn.current").get_attribute("data-turn"))


def test_stepping_through_turns_with_the_keyboard(live_server, page, ran_batch, new_model_call):
    episode = ran_batch.episodes.order_by("pk").first()
    last = Turn.objects.filter(episode=episode).count() - 1
    for turn in range(1, last + 1):
        new_model_call(episode, turn_index=turn)
    dialogs = _dialogs(page)
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/{episode.pk}/")
    assert _visible_turn(page) == last  # the final turn first
    assert page.locator("section.turn:visible").count() == 1

    page.keyboard.press("Home")
    assert _visible_turn(page) == 0 and page.url.endswith("#turn-0")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert _visible_turn(page) == 2 and page.url.endswith("#turn-2")
    assert page.locator(".turn-link.current").inner_text() == "2"
    assert page.locator("#graph-turn-out").inner_text() == "turn 2"  # the graph follows
    page.keyboard.press("ArrowLeft")
    assert _visible_turn(page) == 1
    # Turn 1's curated set is its own panel, and pool rows from later turns are hidden.
    panel = page.locator(".wm-col .per-turn.current")
    assert panel.get_attribute("data-turn") == "1"
    later_rows = page.locator("#pool-rows tr.upto-turn[data-turn='2']")
    if later_rows.count():
        assert not later_rows.first.is_visible()

    # The token strip of the shown turn loads by itself.
    page.locator("#turn-1 .strip .tok").first.wait_for(timeout=5000)
    assert page.locator("#turn-1 .tok.masked").count() > 0

    # Charts and graph are drawn.
    page.locator("#graph-plot .main-svg").first.wait_for(timeout=5000)
    page.locator("#recall-plot .main-svg").first.wait_for(timeout=5000)
    assert page.locator("#graph-plot .scatterlayer .point").count() > 0
    assert "documents" in page.locator("#graph-stats").inner_text()

    # A deep link opens its turn.
    page.goto(f"{live_server.url}/episodes/{episode.pk}/#turn-3")
    assert _visible_turn(page) == 3
    page.keyboard.press("End")
    assert _visible_turn(page) == last
    assert page.console_watcher.errors == []
    assert dialogs == []


def test_the_strip_and_the_header_count_the_same_turns(live_server, page, episode, new_model_call):
    """The demo episode: start, then 9 turns, of which the last only ended the search and
    did not count toward max turns. The header says 9 and 8, the strip shows start, 1 … 9
    with the 9th dashed, and the first sample and call are numbered 1."""
    taken = Turn.objects.filter(episode=episode).count() - 1
    new_model_call(episode, turn_index=1)
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/{episode.pk}/")
    links = page.locator(".turn-strip .turn-link")
    assert links.all_inner_texts() == ["start", *map(str, range(1, taken + 1))]
    facts = page.locator(".episode-head .facts")
    turns = facts.locator("div", has=page.locator("dt", has_text="Turns")).locator("dd")
    assert turns.inner_text().startswith(f"{taken} · {episode.turns} counted toward max turns")
    uncounted = page.locator(".turn-strip .turn-link.uncounted")
    assert uncounted.count() == taken - episode.turns
    assert uncounted.last.evaluate("e => getComputedStyle(e).borderTopStyle") == "dashed"
    sample = facts.locator("div", has=page.locator("dt", has_text="Sample")).locator("dd")
    assert sample.inner_text() == "1 of 2"
    page.keyboard.press("Home")
    assert page.locator("section.turn.current h2").inner_text().startswith("The start")
    assert page.locator("#graph-turn-out").inner_text() == "the start"
    page.keyboard.press("ArrowRight")
    assert page.locator("section.turn.current .model-call").first.inner_text().startswith("call 1 ")
    assert page.console_watcher.errors == []


def test_document_viewer_opens_beside_the_turn(live_server, page, episode):
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/{episode.pk}/")
    page.locator(".wm-col .per-turn.current a.doc").first.click()
    page.locator("#doc-viewer article.document").wait_for(timeout=5000)
    assert "/document/" not in page.url  # loaded in place
    assert page.locator("#doc-viewer .grade").count() == 1
    assert page.console_watcher.errors == []


def test_hostile_text_never_runs(live_server, page, hostile_episode, payloads):
    dialogs = _dialogs(page)
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/{hostile_episode.pk}/#turn-1")
    page.locator("#graph-plot .main-svg").first.wait_for(timeout=5000)
    page.locator("#turn-1 .strip").first.wait_for(timeout=5000)
    # The markup is shown as text where it appears: the observation and the model's reply.
    assert payloads.script in page.locator("#turn-1 pre.reply").first.inner_text()
    assert payloads.img in page.locator("#turn-1 pre.observation").inner_text()
    assert page.locator("img[src=x]").count() == 0
    assert page.locator("a[href^='javascript:']").count() == 0
    # Open the hostile document and step across every turn: still nothing runs.
    page.goto(f"{live_server.url}/episodes/{hostile_episode.pk}/document/?doc=Vell_lamp")
    assert payloads.script in page.locator(".doc-text").inner_text()
    page.goto(f"{live_server.url}/episodes/{hostile_episode.pk}/")
    page.keyboard.press("Home")
    for _ in range(Turn.objects.filter(episode=hostile_episode).count()):
        page.keyboard.press("ArrowRight")
    page.goto(f"{live_server.url}/episodes/?q=river")
    page.wait_for_load_state("networkidle")
    assert dialogs == []
    assert page.console_watcher.errors == []


def test_filters_survive_a_reload_and_copy_a_link(live_server, page, ran_batch):
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/episodes/")
    page.click("#filter-panel summary")  # the filters are folded away until asked for
    page.fill("#id_q", "river")
    page.select_option("#id_status", "completed")
    page.fill("#id_curated_recall_min", "0.5")
    page.select_option("#id_sort", "reward_desc")
    page.click("#episode-filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    # Empty fields stay out of the permalink.
    query = parse_qs(urlsplit(page.url).query)
    assert query == {
        "q": ["river"],
        "status": ["completed"],
        "curated_recall_min": ["0.5"],
        "sort": ["reward_desc"],
    }
    shown = page.locator("table.episodes tbody tr").count()
    expected = Episode.objects.filter(
        query__text__icontains="river", status="completed", curated_recall__gte=0.5
    ).count()
    assert shown == expected

    page.reload()
    assert page.input_value("#id_q") == "river"
    assert page.input_value("#id_status") == "completed"
    assert page.input_value("#id_curated_recall_min") == "0.5"
    assert page.input_value("#id_sort") == "reward_desc"
    assert page.locator("table.episodes tbody tr").count() == expected
    summary = page.locator("#filter-panel summary").inner_text()
    assert "Query text contains = river" in summary and "Status = Completed" in summary

    page.click("#filter-panel summary")
    page.click("#copy-link")
    page.locator("#copy-status").get_by_text("copied", exact=False).or_(
        page.locator("#copy-status").get_by_text("address", exact=False)
    ).wait_for(timeout=3000)
    assert page.console_watcher.errors == []


def test_dashboard_draws_its_charts(live_server, page, ran_batch):
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/")
    for metric in ("curated_recall", "final_answer_recall", "trajectory_recall"):
        page.locator(f"#chart-{metric} .main-svg").first.wait_for(timeout=5000)
    assert page.locator("#chart-curated_recall .bars .point").count() >= 1
    page.click("#theme-toggle")  # charts redraw in the other theme without errors
    page.wait_for_timeout(200)
    assert page.console_watcher.errors == []


def test_compare_view_draws_both_runs(live_server, page, ran_batch):
    a, b = ran_batch.episodes.filter(group=ran_batch.groups.order_by("pk").first())[:2]
    _researcher(page, live_server)
    page.goto(f"{live_server.url}/compare/?a={a.pk}&b={b.pk}")
    page.locator("#compare-plot .main-svg").first.wait_for(timeout=5000)
    assert page.locator("#compare-plot .scatterlayer .trace").count() == 6
    assert page.console_watcher.errors == []


def test_an_annotator_cannot_reach_the_launch_form(live_server, page, db):
    user_ensure(username="arno", password=PASSWORD, role=Role.ANNOTATOR)
    login(page, live_server.url, "arno", PASSWORD)
    assert page.locator("nav a", has_text="Launch batch").count() == 0
    response = page.goto(f"{live_server.url}/batches/new/")
    assert response.status == 403
    assert "researcher role" in page.locator("main").inner_text()
