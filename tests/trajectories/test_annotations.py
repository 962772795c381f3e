"""Annotations: the status rule, the queue and its locks, bulk actions, agreement."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from harness_app.roles import Role
from tests import factories
from trajectories.models import (
    Annotation,
    AnnotationEvent,
    AnnotationLock,
    Episode,
    EpisodeStatus,
)
from trajectories.selectors.agreement import cohens_kappa, fleiss_kappa
from trajectories.selectors.annotation import annotation_bulk_preview, reward_hacking_candidates
from trajectories.services.annotations import (
    AnnotationError,
    annotation_bulk_apply,
    annotation_bulk_undo,
    annotation_label,
    annotation_next,
    status_from_labels,
)
from trajectories.services.rollouts import batch_create

# --- agreement, computed by hand ---------------------------------------------------------


def test_cohens_kappa_two_categories():
    # 10 items; agree on 7 (po = 0.7). Rater A: 6 approve, 4 reject; B: 5 and 5.
    # pe = 0.6·0.5 + 0.4·0.5 = 0.5, so kappa = (0.7 − 0.5) / (1 − 0.5) = 0.4.
    a = list("AAARRRARAA")
    b = list("AARRRAARAR")
    assert cohens_kappa(a, b) == pytest.approx(0.4)


def test_cohens_kappa_three_categories():
    # po = 2/4; both raters: approve 2, reject 1, flag 1 → pe = (4 + 1 + 1)/16 = 0.375.
    # kappa = (0.5 − 0.375) / 0.625 = 0.2.
    a = ["approve", "reject", "flag", "approve"]
    b = ["approve", "reject", "approve", "flag"]
    assert cohens_kappa(a, b) == pytest.approx(0.2)


def test_cohens_kappa_edges():
    assert cohens_kappa(list("ARAR"), list("ARAR")) == pytest.approx(1.0)
    assert cohens_kappa(list("AR"), list("RA")) == pytest.approx(-1.0)
    assert cohens_kappa(list("AAA"), list("AAA")) is None  # 0/0: no variation at all
    with pytest.raises(ValueError, match="labelled 2 and 3 items"):
        cohens_kappa(list("AA"), list("AAA"))


def test_fleiss_kappa_small_table():
    # 4 items × 3 raters × 2 categories. p = (6/12, 6/12) → Pe = 0.5.
    # P_i: [3,0] → 1, [0,3] → 1, [2,1] → (4+1−3)/6 = 1/3, [1,2] → 1/3; mean 2/3.
    # kappa = (2/3 − 1/2) / (1/2) = 1/3.
    assert fleiss_kappa([[3, 0], [0, 3], [2, 1], [1, 2]]) == pytest.approx(1 / 3)


def test_fleiss_kappa_fourteen_raters():
    # Fleiss (1971)'s worked example: 10 items, 14 raters, 5 categories, kappa 0.210.
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    assert fleiss_kappa(table) == pytest.approx(0.2099, abs=1e-4)


def test_fleiss_kappa_edges():
    assert fleiss_kappa([[2, 0], [0, 2]]) == pytest.approx(1.0)
    assert fleiss_kappa([[3, 0], [3, 0]]) is None
    with pytest.raises(ValueError, match="same number of raters"):
        fleiss_kappa([[2, 0], [1, 0]])


@pytest.mark.parametrize(
    ("labels", "status"),
    [
        ([], "none"),
        (["approve", "approve"], "approved"),
        (["reject"], "rejected"),
        (["approve", "reject"], "disputed"),
        (["approve", "flag"], "flagged"),
    ],
)
def test_status_rule(labels, status):
    assert status_from_labels(labels) == status


# --- labels and the queue ----------------------------------------------------------------


@pytest.fixture
def people(db):
    return {name: factories.user(name, Role.ANNOTATOR) for name in ("ann", "bob", "cat")} | {
        "rita": factories.user("rita", Role.RESEARCHER)
    }


@pytest.fixture
def episodes(db):
    # One pending episode (never queued nor bulk-labelled) and five finished ones.
    batch = batch_create(
        benchmark=factories.demo_benchmark(), policy=factories.baseline_policy(), query_limit=1
    )
    rewards = [0.9, 0.8, 0.3, 0.2, 0.1]
    made = factories.synthetic_episodes(batch, 5)
    for episode, reward in zip(made, rewards, strict=True):
        Episode.objects.filter(pk=episode.pk).update(reward=reward)
    return list(Episode.objects.filter(pk__in=[e.pk for e in made]).order_by("pk"))


def test_labelling_keeps_one_row_per_annotator_and_the_episode_status(people, episodes):
    episode = episodes[0]
    annotation_label(annotator=people["ann"], episode=episode, label="approve")
    annotation_label(annotator=people["ann"], episode=episode, label="reject", reason="wasteful")
    annotation_label(annotator=people["bob"], episode=episode, label="approve")
    episode.refresh_from_db()
    assert (episode.annotation_status, episode.annotation_count) == ("disputed", 2)
    assert Annotation.objects.filter(episode=episode).count() == 2
    events = AnnotationEvent.objects.filter(episode=episode, kind="label").order_by("pk")
    assert [e.before and e.before["label"] for e in events] == [None, "approve", None]


def test_a_running_episode_cannot_be_labelled(people, episodes):
    Episode.objects.filter(pk=episodes[0].pk).update(status=EpisodeStatus.RUNNING)
    with pytest.raises(AnnotationError, match="is running; label it once it ends"):
        annotation_label(annotator=people["ann"], episode=episodes[0], label="approve")
    with pytest.raises(AnnotationError, match="label 'maybe' is not one of"):
        annotation_label(annotator=people["ann"], episode=episodes[1], label="maybe")


def test_two_annotators_never_hold_the_same_episode(people, episodes):
    filters = {"batch": episodes[0].batch_id}
    first = annotation_next(annotator=people["ann"], filters=filters, overlap=2)
    second = annotation_next(annotator=people["bob"], filters=filters, overlap=2)
    assert first and second and first.episode.pk != second.episode.pk
    # Asking again hands back the same, unlabelled episode.
    assert annotation_next(annotator=people["ann"], filters=filters).episode == first.episode


def test_overlap_brings_an_episode_back_to_other_annotators_only(people, episodes):
    only = {"batch": episodes[0].batch_id, "reward_min": 0.85}  # just episodes[0]
    taken = annotation_next(annotator=people["ann"], filters=only, overlap=2)
    assert taken.episode == episodes[0]
    assert annotation_next(annotator=people["bob"], filters=only, overlap=2) is None  # held
    annotation_label(annotator=people["ann"], episode=episodes[0], label="approve")
    assert annotation_next(annotator=people["ann"], filters=only, overlap=2) is None  # done
    assert annotation_next(annotator=people["bob"], filters=only, overlap=2).episode == episodes[0]
    annotation_label(annotator=people["bob"], episode=episodes[0], label="approve")
    assert annotation_next(annotator=people["cat"], filters=only, overlap=2) is None  # full


def test_an_expired_lock_is_taken_over(people, episodes):
    only = {"batch": episodes[0].batch_id, "reward_min": 0.85}
    annotation_next(annotator=people["ann"], filters=only)
    assert annotation_next(annotator=people["bob"], filters=only) is None
    AnnotationLock.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    taken = annotation_next(annotator=people["bob"], filters=only)
    assert taken.episode == episodes[0]
    assert AnnotationLock.objects.get().annotator == people["bob"]


def test_queue_refuses_a_bad_overlap(people, episodes):
    with pytest.raises(AnnotationError, match="overlap must be between 1 and 20, got 0"):
        annotation_next(annotator=people["ann"], overlap=0)


@pytest.mark.django_db(transaction=True)
def test_concurrent_queue_calls_hand_out_distinct_episodes():
    if connection.vendor != "postgresql":
        pytest.skip("row locks and concurrent transactions need PostgreSQL")
    batch = factories.run_batch(factories.demo_benchmark(), factories.baseline_policy(), queries=1)
    factories.synthetic_episodes(batch, 12)
    annotators = [factories.user(f"a{i}", Role.ANNOTATOR) for i in range(8)]
    start = threading.Barrier(len(annotators))
    taken: list[int | None] = []

    def work(annotator):
        try:
            start.wait()
            assignment = annotation_next(annotator=annotator, filters={"batch": batch.pk})
            taken.append(assignment.episode.pk if assignment else None)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(a,)) for a in annotators]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert None not in taken and len(set(taken)) == len(annotators)


# --- bulk actions -------------------------------------------------------------------------


def test_bulk_preview_apply_and_undo(people, episodes):
    rita = people["rita"]
    high = {"batch": episodes[0].batch_id, "reward_min": 0.5}
    assert annotation_bulk_preview(filters=high) == 2
    annotation_label(annotator=rita, episode=episodes[0], label="flag", notes="look again")
    action = annotation_bulk_apply(actor=rita, filters=high, label="approve", reason="good")
    assert action.episodes == 2
    statuses = dict(
        Episode.objects.filter(pk__in=[e.pk for e in episodes[:2]]).values_list(
            "pk", "annotation_status"
        )
    )
    assert set(statuses.values()) == {"approved"}
    assert annotation_bulk_undo(action=action, actor=rita) == 2
    episodes[0].refresh_from_db()
    episodes[1].refresh_from_db()
    restored = Annotation.objects.get(episode=episodes[0], annotator=rita)
    assert (restored.label, restored.notes) == ("flag", "look again")
    assert episodes[0].annotation_status == "flagged"
    assert not Annotation.objects.filter(episode=episodes[1]).exists()
    assert episodes[1].annotation_status == "none"
    with pytest.raises(AnnotationError, match="already undone"):
        annotation_bulk_undo(action=action, actor=rita)


def test_undo_keeps_labels_changed_after_the_bulk_action(people, episodes):
    rita = people["rita"]
    action = annotation_bulk_apply(
        actor=rita, filters={"batch": episodes[0].batch_id}, label="approve"
    )
    annotation_label(annotator=rita, episode=episodes[2], label="reject", reason="other")
    restored = annotation_bulk_undo(action=action, actor=rita)
    assert restored == action.episodes - 1
    assert Annotation.objects.get(episode=episodes[2]).label == "reject"


# --- reads ---------------------------------------------------------------------------------


def test_reward_hacking_candidates_are_rejected_but_rewarded(people, episodes):
    ann = people["ann"]
    annotation_label(annotator=ann, episode=episodes[1], label="approve")  # reward 0.8
    annotation_label(annotator=ann, episode=episodes[3], label="approve")  # reward 0.2
    annotation_label(
        annotator=ann, episode=episodes[0], label="reject", reason="x"
    )  # 0.9: suspicious
    annotation_label(
        annotator=ann, episode=episodes[4], label="reject", reason="x"
    )  # 0.1: plainly bad
    found = list(reward_hacking_candidates())
    assert found == [episodes[0]] and found[0].rejections == 1
    assert list(reward_hacking_candidates(min_reward=0.0)) == [episodes[0], episodes[4]]
