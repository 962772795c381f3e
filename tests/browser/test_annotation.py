"""A real Chromium drives the annotation queue's keys: `a` labels and moves on, typing in
the notes box labels nothing, `?` shows the help, and the page logs no errors. One walk
goes through a whole session: counts, skip, a refused rejection, undo, and a researcher
reading the reason on the viewer."""

from __future__ import annotations

import os
from typing import Any

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests.chromium import login
from trajectories.models import Annotation, AnnotationStatus, Episode

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-browser-123"


def _annotator(page: Any, live_server: Any) -> Any:
    user, _ = user_ensure(username="arno", password=PASSWORD, role=Role.ANNOTATOR)
    login(page, live_server.url, "arno", PASSWORD)
    return user


def _shown_episode(page: Any) -> int:
    heading = page.locator("#item-h").inner_text()
    return int(heading.split()[1])


def test_a_approves_and_the_next_item_loads(live_server, page, ran_batch) -> None:
    user = _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    first = _shown_episode(page)
    with page.expect_navigation():
        page.keyboard.press("a")
    page.wait_for_load_state("networkidle")
    assert Annotation.objects.get(annotator=user, episode_id=first).label == "approve"
    assert Episode.objects.get(pk=first).annotation_status == AnnotationStatus.APPROVED
    assert _shown_episode(page) != first
    # k goes back to the item just labelled, showing the annotator's own label.
    with page.expect_navigation():
        page.keyboard.press("k")
    assert page.url.endswith(f"/annotate/episodes/{first}/")
    assert "Your label: Approve" in page.locator("#label-form").inner_text()
    assert page.console_watcher.errors == []


def test_typing_in_the_notes_does_not_label(live_server, page, ran_batch) -> None:
    user = _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    first = _shown_episode(page)
    page.select_option("#id_reason", "wasteful")  # a rejection needs a reason
    page.click("#id_notes")
    page.keyboard.type("a fair answer, f r j k ?")
    page.wait_for_timeout(300)
    assert page.input_value("#id_notes") == "a fair answer, f r j k ?"
    assert not Annotation.objects.filter(annotator=user).exists()
    assert page.locator("#help-overlay").is_hidden()
    # Leaving the box, `r` submits the notes with the rejection.
    page.locator("#id_notes").blur()
    with page.expect_navigation():
        page.keyboard.press("r")
    annotation = Annotation.objects.get(annotator=user, episode_id=first)
    assert (annotation.label, annotation.notes) == ("reject", "a fair answer, f r j k ?")
    assert page.console_watcher.errors == []


def test_question_mark_toggles_the_help(live_server, page, ran_batch) -> None:
    _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    assert page.locator("#help-overlay").is_hidden()
    page.keyboard.press("?")
    assert page.locator("#help-overlay").is_visible()
    assert "approve and go to the next episode" in page.locator("#help-overlay").inner_text()
    page.keyboard.press("a")  # ignored while the help is open
    page.keyboard.press("Escape")
    assert page.locator("#help-overlay").is_hidden()
    page.keyboard.press("?")
    page.keyboard.press("?")
    assert page.locator("#help-overlay").is_hidden()
    assert not Annotation.objects.exists()
    assert page.console_watcher.errors == []


def _count(page: Any, name: str) -> int:
    return int(page.locator(f"#count-{name}").inner_text())


def test_an_annotator_session_then_the_researcher_reads_why(live_server, page, ran_batch) -> None:
    user = _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    total = ran_batch.episodes.count()
    assert (_count(page, "mine-done"), _count(page, "mine-left")) == (0, total)
    assert _count(page, "total") == total
    assert page.locator("#f-benchmark option", has_text=ran_batch.benchmark.name).count() == 1

    # Skip: the next item loads and the count notes one skipped.
    skipped = _shown_episode(page)
    with page.expect_navigation():
        page.click("#skip-button")
    current = _shown_episode(page)
    assert current != skipped and _count(page, "mine-skipped") == 1

    # A rejection without a reason is refused on the form, the notes kept.
    page.fill("#id_notes", "cites a page that never mentions the answer")
    with page.expect_navigation():
        page.click('#label-form button[value="reject"]')
    assert "a rejection needs a reason" in page.locator("#reason-error").inner_text()
    assert page.input_value("#id_notes") == "cites a page that never mentions the answer"
    assert not Annotation.objects.filter(annotator=user).exists()
    # The refusal answers 400, which Chromium logs; nothing else may be logged.
    assert [e for e in page.console_watcher.errors if "400 (Bad Request)" not in e] == []
    page.console_watcher.errors.clear()

    # With a reason it is accepted, the next item comes and the counts move.
    page.select_option("#id_reason", "wrong_evidence")
    with page.expect_navigation():
        page.click('#label-form button[value="reject"]')
    assert _shown_episode(page) != current
    assert (_count(page, "mine-done"), _count(page, "mine-left")) == (1, total - 1)
    assert "episode " + str(current) in page.locator("#undo-bar").inner_text()
    shots = os.environ.get("SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/annotate-queue.png")

    # Undo brings the rejected episode back as the current item; label it again.
    with page.expect_navigation():
        page.click("#undo-button")
    assert _shown_episode(page) == current
    assert not Annotation.objects.filter(annotator=user).exists()
    assert _count(page, "mine-done") == 0
    page.select_option("#id_reason", "wrong_evidence")
    page.fill("#id_notes", "cites a page that never mentions the answer")
    with page.expect_navigation():
        page.click('#label-form button[value="reject"]')
    assert Annotation.objects.get(annotator=user, episode_id=current).reason == "wrong_evidence"
    assert page.console_watcher.errors == []

    # A researcher opens the episode and reads who rejected it, and why.
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    page.context.clear_cookies()
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/episodes/{current}/")
    card = page.locator("#annotations").inner_text()
    assert "arno" in card and "Reject" in card and "wrong_evidence" in card
    assert "cites a page that never mentions the answer" in card
    assert page.console_watcher.errors == []
