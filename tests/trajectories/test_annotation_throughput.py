"""Annotation throughput and what researchers see of it: a rejection needs a reason, skip,
undo of one's latest decision, the queue's counts, and the judgements (reason, note) on
the episode viewer and on "Reward vs judgement"."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from harness_app.roles import Role
from tests import factories
from trajectories.models import (
    Annotation,
    AnnotationEvent,
    AnnotationLock,
    AnnotationStatus,
    Episode,
)
from trajectories.selectors.annotation import queue_counts
from trajectories.services.annotations import (
    AnnotationError,
    annotation_bulk_apply,
    annotation_label,
    annotation_next,
    annotation_skip,
    annotation_undo,
)
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db: Any) -> dict[str, Any]:
    return {name: factories.user(name, Role.ANNOTATOR) for name in ("ann", "bob")} | {
        "rita": factories.user("rita", Role.RESEARCHER)
    }


@pytest.fixture
def episodes(db: Any) -> list[Episode]:
    batch = batch_create(
        benchmark=factories.demo_benchmark(), policy=factories.baseline_policy(), query_limit=1
    )
    made = factories.synthetic_episodes(batch, 4)
    for turns, episode in enumerate(made, start=5):  # four items, not four identical samples
        Episode.objects.filter(pk=episode.pk).update(turns=turns)
    return list(Episode.objects.filter(pk__in=[e.pk for e in made]).order_by("pk"))


def _batch(episodes: list[Episode]) -> dict[str, Any]:
    return {"batch": episodes[0].batch_id}


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- a rejection needs a reason -------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_rejection_without_a_reason_is_refused(people, episodes, reason):
    with pytest.raises(AnnotationError, match="a rejection needs a reason") as caught:
        annotation_label(
            annotator=people["ann"], episode=episodes[0], label="reject", reason=reason
        )
    assert caught.value.field == "reason"
    assert not Annotation.objects.exists()
    # Approvals and flags need none; a bulk rejection needs one too.
    annotation_label(annotator=people["ann"], episode=episodes[0], label="flag")
    with pytest.raises(AnnotationError, match="a rejection needs a reason"):
        annotation_bulk_apply(actor=people["rita"], filters=_batch(episodes), label="reject")


def test_the_queue_page_shows_the_reason_error_and_keeps_the_notes(people, episodes):
    client = _client(people["ann"])
    episode = client.get("/annotate/").context["item"].episode
    response = client.post(
        f"/annotate/episodes/{episode.pk}/label/",
        {"label": "reject", "reason": "", "notes": "kept-NOTE-42"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "a rejection needs a reason" in page and 'aria-invalid="true"' in page
    assert "kept-NOTE-42" in page and response.context["item"].episode == episode
    assert not Annotation.objects.exists()
    assert AnnotationLock.objects.get().episode == episode  # still held for this annotator
    response = client.post(
        f"/annotate/episodes/{episode.pk}/label/",
        {"label": "reject", "reason": "wrong_evidence", "notes": "kept-NOTE-42"},
    )
    assert response.status_code == 302
    assert Annotation.objects.get().reason == "wrong_evidence"


# --- skip -----------------------------------------------------------------------------------


def test_a_skipped_episode_comes_back_after_all_the_others(people, episodes):
    ann, filters = people["ann"], _batch(episodes)
    first = annotation_next(annotator=ann, filters=filters)
    assert first is not None
    annotation_skip(annotator=ann, episode=first.episode)
    assert not AnnotationLock.objects.filter(annotator=ann).exists()
    seen = []
    for _ in episodes[1:]:
        taken = annotation_next(annotator=ann, filters=filters)
        assert taken is not None
        seen.append(taken.episode.pk)
        annotation_label(annotator=ann, episode=taken.episode, label="approve")
    assert first.episode.pk not in seen
    last = annotation_next(annotator=ann, filters=filters)
    assert last is not None and last.episode == first.episode
    # Another annotator's queue is not affected by ann's skip.
    annotation_skip(annotator=ann, episode=first.episode)
    assert annotation_next(annotator=people["bob"], filters=filters).episode == first.episode


def test_skipping_is_only_for_the_episode_one_holds(people, episodes):
    with pytest.raises(AnnotationError, match="not yours to skip"):
        annotation_skip(annotator=people["ann"], episode=episodes[0])


def test_the_skip_button_moves_on_under_the_same_filter(people, episodes):
    client = _client(people["ann"])
    query = f"?batch={episodes[0].batch_id}"
    first = client.get(f"/annotate/{query}").context["item"].episode
    response = client.post(
        f"/annotate/episodes/{first.pk}/skip/", {"batch": str(episodes[0].batch_id)}
    )
    assert response.status_code == 302 and response["Location"] == f"/annotate/{query}"
    after = client.get(response["Location"])
    assert after.context["item"].episode != first
    assert "skipped: it comes back after the others" in after.content.decode()
    assert after.context["counts"].mine_skipped == 1
    assert AnnotationEvent.objects.filter(kind="skip", episode=first).count() == 1


# --- undo -----------------------------------------------------------------------------------


def test_undo_takes_back_the_latest_decision_and_hands_the_episode_back(people, episodes):
    ann, filters = people["ann"], _batch(episodes)
    taken = annotation_next(annotator=ann, filters=filters)
    assert taken is not None
    annotation_label(annotator=ann, episode=taken.episode, label="reject", reason="format")
    following = annotation_next(annotator=ann, filters=filters)
    assert following is not None and following.episode != taken.episode
    assert annotation_undo(annotator=ann, episode=taken.episode) is None
    assert not Annotation.objects.filter(annotator=ann).exists()
    assert Episode.objects.get(pk=taken.episode.pk).annotation_status == AnnotationStatus.NONE
    # The undone episode is this annotator's current item again.
    assert annotation_next(annotator=ann, filters=filters).episode == taken.episode
    # Once only: the latest decision is now the undo itself.
    with pytest.raises(AnnotationError, match="only your latest decision"):
        annotation_undo(annotator=ann, episode=taken.episode)


def test_undo_of_a_relabel_restores_the_earlier_label(people, episodes):
    ann = people["ann"]
    annotation_label(annotator=ann, episode=episodes[0], label="approve", notes="first")
    annotation_label(annotator=ann, episode=episodes[0], label="reject", reason="format")
    restored = annotation_undo(annotator=ann, episode=episodes[0])
    assert restored is not None and (restored.label, restored.notes) == ("approve", "first")
    assert Episode.objects.get(pk=episodes[0].pk).annotation_status == AnnotationStatus.APPROVED


def test_undo_is_refused_for_an_older_decision_a_late_one_or_another_annotator(people, episodes):
    ann = people["ann"]
    annotation_label(annotator=ann, episode=episodes[0], label="approve")
    annotation_label(annotator=ann, episode=episodes[1], label="approve")
    with pytest.raises(AnnotationError, match="only your latest decision"):
        annotation_undo(annotator=ann, episode=episodes[0])  # not the latest
    with pytest.raises(AnnotationError, match="only your latest decision"):
        annotation_undo(annotator=people["bob"], episode=episodes[1])  # not bob's
    AnnotationEvent.objects.filter(kind="label").update(
        created_at=timezone.now() - timedelta(minutes=11)
    )
    with pytest.raises(AnnotationError, match="within 10 minutes"):
        annotation_undo(annotator=ann, episode=episodes[1])  # too late
    assert Annotation.objects.filter(annotator=ann).count() == 2


def test_the_undo_link_follows_a_decision_on_the_queue_page(people, episodes):
    client = _client(people["ann"])
    episode = client.get("/annotate/").context["item"].episode
    client.post(f"/annotate/episodes/{episode.pk}/label/", {"label": "flag"})
    page = client.get("/annotate/").content.decode()
    assert f'action="/annotate/episodes/{episode.pk}/undo/"' in page
    response = client.post(f"/annotate/episodes/{episode.pk}/undo/")
    assert response.status_code == 302 and response["Location"] == "/annotate/"
    again = client.get("/annotate/")
    assert again.context["item"].episode == episode and again.context["undoable"] is None
    assert "decision undone" in again.content.decode()
    assert 'id="undo-bar"' not in again.content.decode()


# --- counts -----------------------------------------------------------------------------------


def test_counts_for_the_annotator_and_overall(people, episodes):
    filters = _batch(episodes)
    annotation_label(annotator=people["ann"], episode=episodes[0], label="approve")
    annotation_label(annotator=people["bob"], episode=episodes[1], label="approve")
    annotation_label(annotator=people["bob"], episode=episodes[0], label="approve")
    annotation_skip(
        annotator=people["ann"],
        episode=annotation_next(annotator=people["ann"], filters=filters).episode,
    )
    counts = queue_counts(annotator=people["ann"], filters=filters, overlap=2)
    # ann labelled 1; left for ann: 1 (needs a second label) + 2 unlabelled; 1 of them skipped.
    assert (counts.mine_done, counts.mine_left, counts.mine_skipped) == (1, 3, 1)
    # Overall with overlap 2: only episodes[0] has both labels.
    assert (counts.done, counts.total, counts.left) == (1, 4, 3)
    assert queue_counts(annotator=people["ann"], filters=filters, overlap=1).done == 2


def test_the_queue_page_shows_the_counts(people, episodes):
    client = _client(people["ann"])
    annotation_label(annotator=people["ann"], episode=episodes[3], label="approve")
    page = client.get("/annotate/").content.decode()
    assert '<span id="count-mine-done">1</span> episodes done' in page
    assert '<span id="count-mine-left">3</span> to go' in page
    assert '<span id="count-done">1</span> of <span id="count-total">4</span>' in page


# --- filters, bulk ---------------------------------------------------------------------------


def test_queue_filters_offer_benchmark_and_policy_dropdowns(people, episodes):
    benchmark_id = episodes[0].batch.benchmark_id
    page = _client(people["ann"]).get(f"/annotate/?benchmark={benchmark_id}").content.decode()
    assert '<select name="benchmark" id="f-benchmark">' in page
    assert f'<option value="{benchmark_id}" selected>' in page
    assert '<select name="policy" id="f-policy">' in page


def test_the_bulk_controls_are_open(people, episodes):
    page = _client(people["rita"]).get("/annotate/bulk/").content.decode()
    assert '<details class="card" open>' in page


# --- researchers see why ---------------------------------------------------------------------


def test_the_viewer_shows_each_judgement_to_researchers_and_only_ones_own_to_annotators(
    people, episodes
):
    episode = episodes[0]
    annotation_label(
        annotator=people["ann"],
        episode=episode,
        label="reject",
        reason="wrong_evidence",
        notes="curated the wrong ANN-NOTE",
    )
    annotation_label(annotator=people["bob"], episode=episode, label="approve", notes="BOB-NOTE")
    page = _client(people["rita"]).get(f"/episodes/{episode.pk}/").content.decode()
    assert 'id="annotations-h">Annotations</h2>' in page
    for text in ("ann", "Reject", "wrong_evidence", "curated the wrong ANN-NOTE", "BOB-NOTE"):
        assert text in page
    blind = _client(people["bob"]).get(f"/episodes/{episode.pk}/").content.decode()
    assert "BOB-NOTE" in blind and "ANN-NOTE" not in blind
    assert "1 other label hidden" in blind


def test_reward_vs_judgement_shows_the_reason_and_the_note(people, episodes):
    Episode.objects.filter(pk=episodes[0].pk).update(reward=0.9)
    annotation_label(
        annotator=people["ann"],
        episode=episodes[0],
        label="reject",
        reason="reward_hacking",
        notes="stuffed-ANSWER",
    )
    page = _client(people["rita"]).get("/annotate/reward-hacking/?min_reward=0.5")
    text = page.content.decode()
    assert "reward_hacking" in text and "stuffed-ANSWER" in text and "— ann" in text
    blind = _client(people["bob"]).get("/annotate/reward-hacking/?min_reward=0.5")
    assert "stuffed-ANSWER" not in blind.content.decode()


def test_a_bulk_rejection_without_a_reason_is_refused_at_preview(people, episodes):
    client = _client(people["rita"])
    params = {"batch": str(episodes[0].batch_id), "label": "reject", "preview": "1"}
    response = client.get("/annotate/bulk/", params)
    assert response.context["preview_error"] == "A rejection needs a reason: choose one."
    assert "preview" not in response.context
    response = client.get("/annotate/bulk/", params | {"reason": "format"})
    assert response.context["preview"] == len(episodes)
