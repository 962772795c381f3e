"""Identical samples in the annotation queue (issue 33): a deterministic policy's repeats are
one item, locked and labelled together, with each copy's label recorded as given on the item;
skip and undo act on the whole item; other annotators and the overlap are kept as before."""

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
    Episode,
    RolloutBatch,
    Turn,
)
from trajectories.selectors.identical import identical_samples
from trajectories.services.annotations import (
    AnnotationError,
    annotation_bulk_apply,
    annotation_label,
    annotation_next,
    annotation_skip,
    annotation_undo,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def batch(demo_benchmark, baseline_policy) -> RolloutBatch:
    """Two queries × three samples of the deterministic baseline: two items of three."""
    return factories.batch_played(
        demo_benchmark, baseline_policy, query_limit=2, samples_per_query=3
    )


@pytest.fixture
def people(db: Any) -> dict[str, Any]:
    return {name: factories.user(name, Role.ANNOTATOR) for name in ("ann", "bob", "cat")}


def _group(batch: RolloutBatch, number: int) -> list[int]:
    group = batch.groups.order_by("pk")[number]
    return list(group.episodes.order_by("pk").values_list("pk", flat=True))


def _next(annotator: Any, batch: RolloutBatch, overlap: int | None = None) -> Episode | None:
    taken = annotation_next(
        annotator=annotator, filters={"batch": batch.pk}, overlap=overlap, with_identical=True
    )
    return taken.episode if taken else None


def _take(annotator: Any, batch: RolloutBatch, overlap: int | None = None) -> Episode:
    taken = _next(annotator, batch, overlap)
    assert taken is not None, "the queue is empty"
    return taken


def _held(annotator: Any) -> set[int]:
    return set(AnnotationLock.objects.filter(annotator=annotator).values_list("episode", flat=True))


def _labels(annotator: Any) -> dict[int, tuple[str, str]]:
    rows = Annotation.objects.filter(annotator=annotator)
    return {
        pk: (label, reason) for pk, label, reason in rows.values_list("episode", "label", "reason")
    }


# --- which samples are identical -------------------------------------------------------------


def test_a_deterministic_policys_samples_are_identical(batch) -> None:
    first, second = _group(batch, 0), _group(batch, 1)
    episode = Episode.objects.get(pk=first[0])
    assert identical_samples(episode=episode, among=Episode.objects.all()) == first[1:]
    assert not set(first) & set(second)  # another query's samples never are


def test_the_same_outcome_by_other_actions_is_not_identical(batch) -> None:
    """The group page would fold these (same figures, same curated set); the queue does not:
    one label must not stand for searches the annotator never saw."""
    first = _group(batch, 0)
    turn = Turn.objects.get(episode_id=first[1], index=1)
    turn.tool_calls = [{**turn.tool_calls[0], "arguments": {"query": "another search"}}]
    turn.save(update_fields=["tool_calls"])
    # Call ids are the policy's numbering, not an action.
    renumbered = Turn.objects.get(episode_id=first[2], index=1)
    renumbered.tool_calls = [{**renumbered.tool_calls[0], "call_id": "call_99"}]
    renumbered.save(update_fields=["tool_calls"])
    episode = Episode.objects.get(pk=first[0])
    assert identical_samples(episode=episode, among=Episode.objects.all()) == [first[2]]


def test_another_outcome_or_curated_set_is_not_identical(batch) -> None:
    first = _group(batch, 0)
    Episode.objects.filter(pk=first[1]).update(format_errors=1)
    item = Episode.objects.get(pk=first[2]).curated_items.order_by("pk").first()
    item.tag = "low" if item.tag != "low" else "fair"
    item.save(update_fields=["tag"])
    episode = Episode.objects.get(pk=first[0])
    assert identical_samples(episode=episode, among=Episode.objects.all()) == []


# --- the queue -------------------------------------------------------------------------------


def test_the_queue_takes_an_item_with_its_identical_samples(batch, people) -> None:
    first, second = _group(batch, 0), _group(batch, 1)
    assert _take(people["ann"], batch).pk == first[0]
    assert _held(people["ann"]) == set(first)
    # Another annotator is never handed a copy of ann's item: the other query comes next.
    assert _take(people["bob"], batch).pk == second[0]
    assert _held(people["bob"]) == set(second)
    assert _next(people["cat"], batch) is None
    # Asking again hands back the same item, not one of its copies.
    assert _take(people["ann"], batch).pk == first[0]


def test_the_api_path_takes_one_episode_at_a_time(batch, people) -> None:
    taken = annotation_next(annotator=people["ann"], filters={"batch": batch.pk})
    assert taken is not None and _held(people["ann"]) == {taken.episode.pk}


def test_one_label_gives_every_identical_sample_the_same_judgement(batch, people) -> None:
    first = _group(batch, 0)
    item = _take(people["ann"], batch)
    annotation_label(
        annotator=people["ann"],
        episode=item,
        label="reject",
        reason="wrong_evidence",
        notes="pads the set",
        with_identical=True,
    )
    assert _labels(people["ann"]) == dict.fromkeys(first, ("reject", "wrong_evidence"))
    assert set(Annotation.objects.values_list("notes", flat=True)) == {"pads the set"}
    statuses = Episode.objects.filter(pk__in=first).values_list("annotation_status", flat=True)
    assert set(statuses) == {"rejected"}
    assert not AnnotationLock.objects.exists()
    # Recorded as such: the item's event names its copies, each copy's event the item.
    events = {e.episode_id: e.after for e in AnnotationEvent.objects.filter(kind="label")}
    assert events[first[0]]["identical"] == first[1:]
    assert [events[pk]["identical_to"] for pk in first[1:]] == [first[0]] * 2
    # The next item is the other query's, never a copy of the one just labelled.
    assert _take(people["ann"], batch).pk == _group(batch, 1)[0]


def test_with_overlap_the_next_annotator_gets_the_whole_item(batch, people) -> None:
    first = _group(batch, 0)
    item = _take(people["ann"], batch, overlap=2)
    annotation_label(annotator=people["ann"], episode=item, label="approve", with_identical=True)
    # Episodes others labelled come first: bob gets the item, with all its samples.
    again = _take(people["bob"], batch, overlap=2)
    assert again.pk == first[0] and _held(people["bob"]) == set(first)
    annotation_label(
        annotator=people["bob"], episode=again, label="reject", reason="other", with_identical=True
    )
    counts = Episode.objects.filter(pk__in=first).values_list(
        "annotation_count", "annotation_status"
    )
    assert set(counts) == {(2, "disputed")}
    assert _take(people["cat"], batch, overlap=2).pk == _group(batch, 1)[0]  # item is full


def test_a_copy_another_annotator_holds_keeps_its_own_label(batch, people) -> None:
    first = _group(batch, 0)
    item = _take(people["ann"], batch)
    # ann's lock on the last copy ran out and bob took that episode in the meantime.
    AnnotationLock.objects.filter(episode_id=first[2]).update(annotator=people["bob"])
    annotation_label(annotator=people["ann"], episode=item, label="approve", with_identical=True)
    assert set(_labels(people["ann"])) == set(first[:2])
    assert AnnotationLock.objects.get().annotator == people["bob"]


def test_skip_puts_the_whole_item_back(batch, people) -> None:
    first, second = _group(batch, 0), _group(batch, 1)
    item = _take(people["ann"], batch)
    annotation_skip(annotator=people["ann"], episode=item)
    assert not AnnotationLock.objects.exists()
    skips = AnnotationEvent.objects.filter(kind="skip").values_list("episode", flat=True)
    assert sorted(skips) == first
    nxt = _take(people["ann"], batch)
    assert nxt.pk == second[0]
    annotation_label(annotator=people["ann"], episode=nxt, label="approve", with_identical=True)
    assert _take(people["ann"], batch).pk == first[0] and _held(people["ann"]) == set(first)


def test_undo_takes_back_the_item_and_hands_it_back_whole(batch, people) -> None:
    first = _group(batch, 0)
    item = _take(people["ann"], batch)
    annotation_label(annotator=people["ann"], episode=item, label="flag", with_identical=True)
    assert annotation_undo(annotator=people["ann"], episode=item) is None
    assert not Annotation.objects.exists()
    statuses = Episode.objects.filter(pk__in=first).values_list("annotation_status", flat=True)
    assert set(statuses) == {"none"}
    assert _held(people["ann"]) == set(first)
    undone = AnnotationEvent.objects.filter(kind="undo").values_list("episode", flat=True)
    assert sorted(undone) == first
    assert _take(people["ann"], batch).pk == first[0]


def test_relabelling_the_item_changes_its_copies_and_undo_restores_them(batch, people) -> None:
    first = _group(batch, 0)
    item = _take(people["ann"], batch)
    annotation_label(annotator=people["ann"], episode=item, label="approve", with_identical=True)
    annotation_label(
        annotator=people["ann"],
        episode=item,
        label="reject",
        reason="wasteful",
        with_identical=True,
    )
    assert _labels(people["ann"]) == dict.fromkeys(first, ("reject", "wasteful"))
    assert annotation_undo(annotator=people["ann"], episode=item) is not None
    assert _labels(people["ann"]) == dict.fromkeys(first, ("approve", ""))


def test_undo_is_refused_when_a_copy_changed_since(batch, people) -> None:
    first = _group(batch, 0)
    item = _take(people["ann"], batch)
    annotation_label(annotator=people["ann"], episode=item, label="approve", with_identical=True)
    annotation_bulk_apply(
        actor=people["ann"], filters={"ids": str(first[1])}, label="reject", reason="other"
    )
    with pytest.raises(AnnotationError, match=f"your label on episode {first[1]}, an identical"):
        annotation_undo(annotator=people["ann"], episode=item)
    assert len(_labels(people["ann"])) == 3  # nothing half-undone


# --- the page --------------------------------------------------------------------------------


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_the_count_and_one_label_applies_to_all(batch, people) -> None:
    """Issue 33: the demo queue served identical episodes one after another."""
    client = _client(people["ann"])
    first, second = _group(batch, 0), _group(batch, 1)
    response = client.get("/annotate/")
    assert response.context["item"].episode.pk == first[0]
    assert "×3 identical samples — your label applies to all 3" in response.content.decode()
    client.post(f"/annotate/episodes/{first[0]}/label/", {"label": "approve"})
    nxt = client.get("/annotate/")
    assert nxt.context["item"].episode.pk == second[0]  # not a copy of the one just labelled
    assert f"episode {first[0]} and its 2 identical samples" in nxt.content.decode()  # undo bar
    assert _labels(people["ann"]) == dict.fromkeys(first, ("approve", ""))
    # Its review says a new label changes all three; `k` steps item by item, not copy by copy.
    client.post(f"/annotate/episodes/{second[0]}/label/", {"label": "approve"})
    review = client.get(f"/annotate/episodes/{second[0]}/")
    assert "labelling again changes all 3" in review.content.decode()
    assert review.context["prev_url"] == f"/annotate/episodes/{first[0]}/"


def test_an_expired_item_is_taken_over_whole(batch, people) -> None:
    first = _group(batch, 0)
    _take(people["ann"], batch)
    AnnotationLock.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _take(people["bob"], batch).pk == first[0]
    assert _held(people["bob"]) == set(first) and _held(people["ann"]) == set()


def test_the_skip_button_puts_the_whole_item_back(batch, people) -> None:
    client = _client(people["ann"])
    first, second = _group(batch, 0), _group(batch, 1)
    client.get("/annotate/")
    response = client.post(f"/annotate/episodes/{first[0]}/skip/", follow=True)
    page = response.content.decode()
    assert f"Episode {first[0]} and its 2 identical samples skipped: they come back" in page
    assert response.context["item"].episode.pk == second[0]
    assert response.context["counts"].mine_skipped == 3
