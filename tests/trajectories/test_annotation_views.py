"""The annotator pages: queue and labels, blindness, bulk actions, agreement, reward vs
judgement, provenance on the viewer, roles and query counts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from harness_app.roles import Role
from harness_app.services.users import user_ensure
from training.models import SFTExport, SFTExportEpisode
from trajectories.models import (
    Annotation,
    AnnotationBulkAction,
    AnnotationLock,
    AnnotationStatus,
    Episode,
)
from trajectories.selectors.agreement import cohens_kappa, fleiss_kappa
from trajectories.selectors.annotation import annotation_bulk_preview
from trajectories.services.annotations import annotation_label

pytestmark = pytest.mark.django_db

LOGIN_QUERIES = 3  # session, user, the user's groups


def _client(username: str, role: Role | None) -> tuple[Client, Any]:
    user, _ = user_ensure(username=username, password="pw-annotate-123", role=role)
    client = Client()
    client.force_login(user)
    return client, user


def _current(response: Any) -> Episode:
    item = response.context["item"]
    assert item is not None
    return item.episode


# --- the queue ----------------------------------------------------------------------------


def test_queue_gives_an_item_and_labelling_it_moves_on(ran_batch) -> None:
    client, user = _client("ann", Role.ANNOTATOR)
    response = client.get("/annotate/")
    assert response.status_code == 200
    first = _current(response)
    assert AnnotationLock.objects.filter(episode=first, annotator=user).exists()
    page = response.content.decode()
    assert first.query.text in page and f"/episodes/{first.pk}/" in page
    assert "Guidelines" in page and 'id="label-form"' in page

    response = client.post(
        f"/annotate/episodes/{first.pk}/label/",
        {"label": "approve", "reason": "good_trajectory", "notes": "clean"},
    )
    assert response.status_code == 302 and response["Location"] == "/annotate/"
    annotation = Annotation.objects.get(episode=first, annotator=user)
    assert (annotation.label, annotation.reason, annotation.notes) == (
        "approve",
        "good_trajectory",
        "clean",
    )
    first.refresh_from_db()
    assert first.annotation_status == AnnotationStatus.APPROVED
    assert not AnnotationLock.objects.filter(episode=first).exists()

    second = _current(client.get("/annotate/"))
    assert second.pk != first.pk


def test_reload_keeps_the_same_item(ran_batch) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    assert _current(client.get("/annotate/")).pk == _current(client.get("/annotate/")).pk


def test_two_annotators_get_different_items(ran_batch) -> None:
    one, _ = _client("ann1", Role.ANNOTATOR)
    two, _ = _client("ann2", Role.ANNOTATOR)
    assert _current(one.get("/annotate/")).pk != _current(two.get("/annotate/")).pk


def test_filter_in_get_params_limits_the_queue_and_is_shown(ran_batch) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    target = ran_batch.episodes.order_by("-pk").first()
    response = client.get(f"/annotate/?query={target.query_id}&batch={ran_batch.pk}")
    episode = _current(response)
    assert episode.query_id == target.query_id
    page = response.content.decode()
    assert f"query={target.query_id}" in page and "Active filter" in page
    # The label form carries the filter on, so the next item is under it too.
    response = client.post(
        f"/annotate/episodes/{episode.pk}/label/",
        {
            "label": "reject",
            "reason": "incomplete",
            "query": str(target.query_id),
            "batch": str(ran_batch.pk),
        },
    )
    assert response["Location"] == f"/annotate/?batch={ran_batch.pk}&query={target.query_id}"


def test_bad_filter_is_reported_and_ignored(ran_batch) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    response = client.get("/annotate/?reward_min=lots")
    assert response.status_code == 200
    assert "reward_min" in response.context["filters"].error
    assert AnnotationLock.objects.count() == 0  # nothing taken under a filter it cannot read


def test_empty_queue_says_so(ran_batch) -> None:
    client, user = _client("ann", Role.ANNOTATOR)
    for episode in ran_batch.episodes.all():
        annotation_label(annotator=user, episode=episode, label="approve")
    response = client.get("/annotate/")
    assert response.status_code == 200 and response.context.get("item") is None
    assert "Nothing left to label" in response.content.decode()


def test_annotator_is_blind_to_the_others_label(ran_batch, settings) -> None:
    settings.ANNOTATION_OVERLAP = 2
    first, first_user = _client("ann1", Role.ANNOTATOR)
    second, _ = _client("ann2", Role.ANNOTATOR)
    episode = _current(first.get("/annotate/"))
    first.post(
        f"/annotate/episodes/{episode.pk}/label/",
        {"label": "flag", "reason": "reward_hacking", "notes": "SECRET-NOTE-31337"},
    )
    response = second.get("/annotate/")
    assert _current(response).pk == episode.pk  # episodes others labelled come first
    assert response.context["item"].mine is None
    page = response.content.decode()
    assert "SECRET-NOTE-31337" not in page
    assert "Your label:" not in page
    assert not re.search(r'value="reward_hacking"[^>]*checked', page)
    assert re.search(r'value=""[^>]*checked', page)  # "No reason", the form's own start
    assert Annotation.objects.filter(annotator=first_user).count() == 2  # both samples


def test_label_refused_while_another_holds_the_episode(ran_batch) -> None:
    one, _ = _client("ann1", Role.ANNOTATOR)
    two, _ = _client("ann2", Role.ANNOTATOR)
    held = _current(one.get("/annotate/"))
    response = two.post(f"/annotate/episodes/{held.pk}/label/", {"label": "approve"})
    assert response.status_code == 302
    assert not Annotation.objects.filter(episode=held).exists()


def test_bad_label_is_an_error_message_not_a_crash(ran_batch) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    episode = _current(client.get("/annotate/"))
    response = client.post(
        f"/annotate/episodes/{episode.pk}/label/", {"label": "maybe"}, follow=True
    )
    assert "is not one of" in response.content.decode()
    assert not Annotation.objects.exists()


def test_review_shows_own_label_and_links_previous_and_next(ran_batch) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    a = _current(client.get("/annotate/"))
    client.post(
        f"/annotate/episodes/{a.pk}/label/", {"label": "reject", "reason": "other", "notes": "mine"}
    )
    b = _current(client.get("/annotate/"))
    client.post(f"/annotate/episodes/{b.pk}/label/", {"label": "approve"})
    queue = client.get("/annotate/")
    assert queue.context["prev_url"] == f"/annotate/episodes/{b.pk}/"
    review = client.get(f"/annotate/episodes/{b.pk}/")
    assert review.status_code == 200 and review.context["item"].mine.label == "approve"
    assert review.context["prev_url"] == f"/annotate/episodes/{a.pk}/"
    assert review.context["next_url"] == "/annotate/"
    earlier = client.get(f"/annotate/episodes/{a.pk}/")
    assert "mine" in earlier.content.decode()
    assert earlier.context["next_url"] == f"/annotate/episodes/{b.pk}/"
    other, _ = _client("ann2", Role.ANNOTATOR)
    assert other.get(f"/annotate/episodes/{a.pk}/").status_code == 404  # not theirs


def test_queue_page_escapes_untrusted_text(hostile_episode, payloads) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    response = client.get("/annotate/")
    page = response.content.decode()
    assert _current(response).pk == hostile_episode.pk
    for payload in payloads.all:
        assert payload not in page


def test_queue_page_query_counts_are_pinned(ran_batch, django_assert_max_num_queries) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    client.get("/")  # the session's first request settles the login
    # Taking a new item: savepoint, the held lock, stale locks deleted, candidates, the
    # episode row lock, expired locks, savepoint + lock insert + release, lock event, the
    # episode; its identical sample found (candidates, curated sets, calls) and taken the
    # same way (six); savepoint release. Then the item (episode, qrels, curated set, own
    # label), its trajectory (turns, curation log, verifications), the identical samples a
    # label gives (own label, candidates, curated sets, calls), the counts, the undoable
    # decision, the last label for `k`, and the benchmark and policy dropdowns.
    with django_assert_max_num_queries(LOGIN_QUERIES + 40):
        response = client.get("/annotate/")
    assert response.context["item"].count == 2
    # The same item again, held: savepoint, the held lock, savepoint release, then the same.
    with django_assert_max_num_queries(LOGIN_QUERIES + 19):
        client.get("/annotate/")


def test_annotate_link_in_nav_for_roles_only(ran_batch) -> None:
    annotator, _ = _client("ann", Role.ANNOTATOR)
    assert 'href="/annotate/">Annotate</a>' in annotator.get("/episodes/").content.decode()
    nobody, _ = _client("nobody", None)
    assert nobody.get("/annotate/").status_code == 403


# --- bulk actions -------------------------------------------------------------------------


def test_bulk_preview_then_apply_then_undo_restores(ran_batch) -> None:
    client, researcher = _client("rita", Role.RESEARCHER)
    other, other_user = _client("ann", Role.ANNOTATOR)
    some = ran_batch.episodes.order_by("pk").first()
    annotation_label(annotator=researcher, episode=some, label="flag", reason="other")
    filters = {"final_answer_recall_min": "0", "batch": str(ran_batch.pk)}
    expected = annotation_bulk_preview(filters=filters)
    assert expected == ran_batch.episodes.count()

    response = client.get("/annotate/bulk/", {**filters, "label": "approve", "preview": "1"})
    assert response.status_code == 200 and response.context["preview"] == expected
    assert f'<b id="preview-count">{expected}</b>' in response.content.decode()
    assert not AnnotationBulkAction.objects.exists()  # the preview writes nothing

    response = client.post("/annotate/bulk/apply/", {**filters, "label": "approve"})
    assert response.status_code == 302
    action = AnnotationBulkAction.objects.get()
    assert action.episodes == expected
    assert Annotation.objects.filter(annotator=researcher, label="approve").count() == expected
    page = client.get("/annotate/bulk/").content.decode()
    assert f"/annotate/bulk/{action.pk}/undo/" in page

    response = client.post(f"/annotate/bulk/{action.pk}/undo/")
    assert response.status_code == 302
    action.refresh_from_db()
    assert action.undone_at is not None and action.undone_by == researcher
    labels = dict(Annotation.objects.filter(annotator=researcher).values_list("episode", "label"))
    assert labels == {some.pk: "flag"}  # the earlier label is back; the rest are gone
    statuses = dict(ran_batch.episodes.values_list("pk", "annotation_status"))
    assert statuses.pop(some.pk) == AnnotationStatus.FLAGGED
    assert set(statuses.values()) == {AnnotationStatus.NONE}
    # A second undo is refused with a message, not a crash.
    again = client.post(f"/annotate/bulk/{action.pk}/undo/", follow=True)
    assert "already undone" in again.content.decode()
    assert other_user.pk  # the annotator client exists only to prove the 403 below
    assert other.post(f"/annotate/bulk/{action.pk}/undo/").status_code == 403


def test_bulk_needs_a_filter_and_a_label(ran_batch) -> None:
    client, _ = _client("rita", Role.RESEARCHER)
    response = client.get("/annotate/bulk/", {"label": "approve", "preview": "1"})
    assert "needs one" in response.context["preview_error"]
    response = client.get("/annotate/bulk/", {"batch": str(ran_batch.pk), "preview": "1"})
    assert response.context["preview_error"] == "Choose a label."
    client.post("/annotate/bulk/apply/", {"label": "approve"})
    assert not AnnotationBulkAction.objects.exists()


def test_bulk_is_for_researchers_only(ran_batch) -> None:
    client, _ = _client("ann", Role.ANNOTATOR)
    assert client.get("/annotate/bulk/").status_code == 403
    response = client.post("/annotate/bulk/apply/", {"batch": ran_batch.pk, "label": "approve"})
    assert response.status_code == 403
    assert not Annotation.objects.exists()
    assert 'href="/annotate/bulk/"' not in client.get("/annotate/").content.decode()


# --- agreement, reward vs judgement, provenance --------------------------------------------


def test_agreement_page_matches_the_kappa_functions(ran_batch) -> None:
    client, _ = _client("rita", Role.RESEARCHER)
    users = [_client(name, Role.ANNOTATOR)[1] for name in ("ann1", "ann2", "ann3")]
    episodes = list(ran_batch.episodes.order_by("pk"))
    plan = {  # episode index -> labels by ann1, ann2, ann3
        0: ["approve", "approve", "approve"],
        1: ["approve", "reject", "reject"],
        2: ["reject", "reject", "flag"],
        3: ["approve", "approve", "reject"],
    }
    for index, labels in plan.items():
        for user, label in zip(users, labels, strict=True):
            annotation_label(annotator=user, episode=episodes[index], label=label, reason="other")
    response = client.get("/annotate/agreement/")
    assert response.status_code == 200
    page = response.content.decode()
    pairs = response.context["agreement"]["cohen"]
    assert len(pairs) == 3
    for pair in pairs:
        i, j = (next(k for k, u in enumerate(users) if u.pk == a) for a in pair["annotators"])
        expected = cohens_kappa([plan[e][i] for e in plan], [plan[e][j] for e in plan])
        assert pair["kappa"] == pytest.approx(expected) and pair["episodes"] == 4
        assert pair["names"] == [users[i].username, users[j].username]
        assert f'<td class="num">{expected:.3f}</td><td class="num">4</td>' in page
    table = [[labels.count(c) for c in ("approve", "reject", "flag")] for labels in plan.values()]
    fleiss = fleiss_kappa(table)
    assert fleiss is not None
    assert f"κ = <b>{fleiss:.3f}</b> · n = 4 episodes × 3 annotators" in page


def test_agreement_page_without_overlap_is_empty(ran_batch) -> None:
    client, _ = _client("ria", Role.RESEARCHER)
    page = client.get("/annotate/agreement/").content.decode()
    assert "No episode has two annotators yet" in page and "n = 0 episodes" in page


def test_reward_hacking_page_lists_a_rejected_high_reward_episode(ran_batch) -> None:
    client, user = _client("ann", Role.ANNOTATOR)
    low, high = list(ran_batch.episodes.order_by("pk")[:2])
    Episode.objects.filter(pk=low.pk).update(reward=0.2)
    Episode.objects.filter(pk=high.pk).update(reward=0.9)
    annotation_label(annotator=user, episode=low, label="approve")
    annotation_label(annotator=user, episode=high, label="reject", reason="reward_hacking")
    response = client.get("/annotate/reward-hacking/")
    assert response.status_code == 200
    assert [e.pk for e in response.context["episodes"]] == [high.pk]
    page = response.content.decode()
    assert f'href="/episodes/{high.pk}/"' in page and f'href="/episodes/{low.pk}/"' not in page
    # Above the chosen minimum there is nothing; a bad minimum falls back to the default.
    assert not client.get("/annotate/reward-hacking/?min_reward=0.95").context["episodes"]
    bad = client.get("/annotate/reward-hacking/?min_reward=nan")
    assert bad.context["error"] and [e.pk for e in bad.context["episodes"]] == [high.pk]


def test_viewer_shows_the_sft_exports_holding_the_episode(researcher_client, ran_batch) -> None:
    episode = ran_batch.episodes.order_by("pk").first()
    assert (
        "Not in any SFT export"
        in researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    )
    export = SFTExport.objects.create(status="done", episodes=1, records=2)
    SFTExportEpisode.objects.create(
        export=export, episode=episode, first_line=4, records=2, sha256="ab" * 32
    )
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert f"Export {export.pk}" in page and "lines 4–5" in page
