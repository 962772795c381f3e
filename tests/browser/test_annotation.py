"""A real Chromium drives the annotation queue's keys: `a` labels and moves on, typing in
the notes box labels nothing, `?` shows the help, a letter never changes the focused reason,
and the page logs no errors. One walk goes through a whole session by keyboard alone; another
with the mouse: counts, skip, a refused rejection, undo, and a researcher reading the reason
on the viewer. The item card shows the compact trajectory on a 1400 × 900 screen."""

from __future__ import annotations

import os
from typing import Any

import pytest

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from trajectories.models import Annotation, AnnotationStatus, Episode, RolloutBatch

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
    page.check("#reasons input[value=wasteful]")  # a rejection needs a reason
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
    assert (annotation.label, annotation.reason, annotation.notes) == (
        "reject",
        "wasteful",
        "a fair answer, f r j k ?",
    )
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
    total = ran_batch.episodes.count()  # two queries, two identical samples of each
    assert (_count(page, "mine-done"), _count(page, "mine-left")) == (0, total)
    assert _count(page, "total") == total
    assert page.locator("#f-benchmark option", has_text=ran_batch.benchmark.name).count() == 1

    # Skip: the next item loads and the count notes one skipped.
    skipped = _shown_episode(page)
    with page.expect_navigation():
        page.click("#skip-button")
    current = _shown_episode(page)
    assert current != skipped and _count(page, "mine-skipped") == 2  # both samples

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

    # With a reason it is accepted for both samples, the next item comes and the counts move.
    page.check("#reasons input[value=wrong_evidence]")
    with page.expect_navigation():
        page.click('#label-form button[value="reject"]')
    assert _shown_episode(page) != current
    assert (_count(page, "mine-done"), _count(page, "mine-left")) == (2, total - 2)
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
    page.check("#reasons input[value=wrong_evidence]")
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


def test_letter_keys_never_change_the_focused_reason(live_server, page, ran_batch) -> None:
    """Issue 33: with the Reason control focused, `r` went to its type-ahead and picked
    "Reward hacking", and the next `r` saved that. The chosen reason must be the one saved."""
    user = _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    first = _shown_episode(page)
    reason = page.get_by_label("Curated the wrong evidence")
    reason.focus()
    reason.check()
    assert "r will save: Reject — Curated the wrong evidence" in page.inner_text("#will-save")
    with page.expect_navigation():
        page.keyboard.press("r")
    page.keyboard.press("r")  # the next item has no reason yet: this saves nothing
    page.wait_for_load_state("networkidle")
    annotation = Annotation.objects.get(annotator=user, episode_id=first)
    assert (annotation.label, annotation.reason) == ("reject", "wrong_evidence")
    # The item was two identical samples: both carry the chosen reason, and nothing else
    # was saved; the page says why the second `r` did nothing.
    assert [a.reason for a in Annotation.objects.filter(annotator=user)] == ["wrong_evidence"] * 2
    assert "r needs a reason first (keys 1–7)" in page.inner_text("#will-save")
    assert page.console_watcher.errors == []


def test_a_letter_on_a_focused_reason_or_button_leaves_it_as_it_was(
    live_server, page, ran_batch
) -> None:
    user = _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    page.focus("#reason-3")
    page.keyboard.press("3")
    for key in ("g", "w", "o", "x"):  # letters of other reasons, and of none
        page.keyboard.press(key)
    assert page.locator("#reasons input:checked").get_attribute("value") == "wrong_evidence"
    assert page.evaluate("document.activeElement.id") == "reason-3"
    page.focus('#label-form button[value="flag"]')
    page.keyboard.press("x")
    assert not Annotation.objects.filter(annotator=user).exists()
    assert page.console_watcher.errors == []


@pytest.fixture
def three_items(demo_benchmark, baseline_policy) -> RolloutBatch:
    """Three queries × two samples of the deterministic baseline: three items of two."""
    return factories.batch_played(
        demo_benchmark, baseline_policy, query_limit=3, samples_per_query=2
    )


def _in_view(page: Any, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= size["height"]


def test_the_queue_by_keyboard_alone(live_server, page, three_items) -> None:
    """Done when (issue 33): approve, skip, reject with a reason chosen by its number key,
    undo, label again and flag, with no mouse click; the stored reasons are the chosen ones."""
    user = _annotator(page, live_server)
    page.goto(f"{live_server.url}/annotate/")
    page.keyboard.press("?")
    help_text = page.inner_text("#help-overlay")
    assert "choose a reason" in help_text and "open the episode in the full viewer" in help_text
    page.keyboard.press("Escape")

    # The card: the item stands for its two identical samples, and its trajectory, the
    # reasons and the buttons are all on the screen without scrolling.
    approved = _shown_episode(page)
    assert "×2 identical samples — your label applies to all 2" in page.inner_text("#item-h ~ *")
    for part in ("#trajectory", "#reasons", '#label-form button[value="reject"]'):
        assert _in_view(page, part), part
    assert "end_search" in page.inner_text("#trajectory")
    page.keyboard.press("3")  # a reason, and what `r` would save with it
    assert "r will save: Reject — Curated the wrong evidence" in page.inner_text("#will-save")
    shots = os.environ.get("SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=f"{shots}/annotate-card.png")
    page.keyboard.press("0")  # no reason after all
    assert page.inner_text("#will-save").startswith("a will save: Approve")
    with page.expect_navigation():
        page.keyboard.press("a")

    skipped = _shown_episode(page)
    with page.expect_navigation():
        page.keyboard.press("s")

    rejected = _shown_episode(page)
    assert rejected not in (approved, skipped)
    page.keyboard.press("r")  # no reason yet: nothing is saved, the reasons take the focus
    assert "r needs a reason first (keys 1–7)" in page.inner_text("#will-save")
    assert page.evaluate("document.activeElement.name") == "reason"
    page.keyboard.press("3")
    assert "r will save: Reject — Curated the wrong evidence" in page.inner_text("#will-save")
    with page.expect_navigation():
        page.keyboard.press("r")
    assert _reasons(user, rejected) == [("reject", "wrong_evidence")] * 2

    with page.expect_navigation():
        page.keyboard.press("u")  # undo: the item comes back, both samples unlabelled
    assert _shown_episode(page) == rejected and _reasons(user, rejected) == []
    page.keyboard.press("4")
    with page.expect_navigation():
        page.keyboard.press("r")
    assert _reasons(user, rejected) == [("reject", "incomplete")] * 2

    assert _shown_episode(page) == skipped  # the skipped item comes back last
    with page.expect_navigation():
        page.keyboard.press("f")
    assert "Nothing left to label" in page.inner_text("main")
    assert _reasons(user, approved) == [("approve", "")] * 2
    assert _reasons(user, skipped) == [("flag", "")] * 2

    # `k` reviews the last label, `v` opens its episode in the full viewer.
    with page.expect_navigation():
        page.keyboard.press("k")
    assert page.url.endswith(f"/annotate/episodes/{skipped}/")
    with page.expect_navigation():
        page.keyboard.press("v")
    assert page.url.endswith(f"/episodes/{skipped}/")
    assert page.console_watcher.errors == []


def _reasons(user: Any, episode_id: int) -> list[tuple[str, str]]:
    """The annotator's (label, reason) on the episode and its identical samples."""
    group = Episode.objects.get(pk=episode_id).group_id
    rows = Annotation.objects.filter(annotator=user, episode__group_id=group).order_by("pk")
    return list(rows.values_list("label", "reason"))
