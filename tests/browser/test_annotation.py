"""A real Chromium drives the annotation queue's keys: `a` labels and moves on, typing in
the notes box labels nothing, `?` shows the help, and the page logs no errors."""

from __future__ import annotations

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
