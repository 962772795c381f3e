"""Annotations over the API: label, list (own only for annotators), the queue, bulk."""

from __future__ import annotations

import pytest

from harness_app.roles import Role
from tests import factories
from trajectories.models import Annotation, AnnotationBulkAction

pytestmark = pytest.mark.django_db


@pytest.fixture
def ran(demo_benchmark, baseline_policy):
    return factories.run_batch(demo_benchmark, baseline_policy, queries=3)


def test_annotator_labels_an_episode(annotator_api, ran):
    episode = ran.episodes.first()
    body = {"episode": episode.pk, "label": "approve", "reason": "good_trajectory"}
    response = annotator_api.post("/api/annotations/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["annotator"] == "anna"
    episode.refresh_from_db()
    assert episode.annotation_status == "approved"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"episode": None, "label": "approve"}, "episode", "This field may not be null."),
        ({"episode": 424242, "label": "approve"}, "episode", "object does not exist"),
        ({"label": "maybe"}, "label", '"maybe" is not a valid choice.'),
        ({"label": "reject", "reason": "x" * 201}, "reason", "no more than 200 characters"),
    ],
)
def test_bad_labels_name_the_field(annotator_api, ran, body, field, message):
    body = {"episode": ran.episodes.first().pk} | body
    response = annotator_api.post("/api/annotations/", body, format="json")
    assert response.status_code == 400
    assert message in response.json()[field][0]


def test_annotators_list_only_their_own_labels(annotator_api, researcher_api, ran, annotator):
    other = factories.client_for(factories.user("otto", "annotator"))
    first, second = ran.episodes.order_by("pk")[:2]
    annotator_api.post("/api/annotations/", {"episode": first.pk, "label": "approve"})
    other.post("/api/annotations/", {"episode": second.pk, "label": "reject", "reason": "format"})
    mine = annotator_api.get("/api/annotations/").json()["results"]
    assert [(a["episode"], a["annotator"]) for a in mine] == [(first.pk, "anna")]
    assert researcher_api.get("/api/annotations/").json()["count"] == 2
    one = researcher_api.get("/api/annotations/", {"episode": second.pk}).json()
    assert [a["label"] for a in one["results"]] == ["reject"]


def test_the_queue_gives_two_annotators_different_episodes(annotator_api, ran):
    other = factories.client_for(factories.user("otto", "annotator"))
    body = {"filters": {"batch": ran.pk}, "overlap": 1}
    first = annotator_api.post("/api/annotations/next/", body, format="json")
    second = other.post("/api/annotations/next/", body, format="json")
    assert first.status_code == second.status_code == 200
    assert first.json()["episode"]["id"] != second.json()["episode"]["id"]
    assert "expires_at" in first.json()


def test_an_empty_queue_is_204(annotator_api, ran):
    body = {"filters": {"batch": ran.pk, "reward_min": 99}}
    assert annotator_api.post("/api/annotations/next/", body, format="json").status_code == 204


def test_queue_filters_are_checked(annotator_api, ran):
    body = {"filters": {"colour": "red"}, "overlap": 1}
    response = annotator_api.post("/api/annotations/next/", body, format="json")
    assert response.status_code == 400
    assert "unknown filter" in response.json()["filters.colour"][0]
    response = annotator_api.post("/api/annotations/next/", {"overlap": 0}, format="json")
    assert "greater than or equal to 1" in response.json()["overlap"][0]


def test_bulk_preview_apply_undo(researcher_api, ran):
    body = {"filters": {"batch": ran.pk}}
    assert researcher_api.post("/api/annotations/bulk/preview/", body, format="json").json() == {
        "episodes": 3
    }
    response = researcher_api.post(
        "/api/annotations/bulk/", body | {"label": "approve"}, format="json"
    )
    assert response.status_code == 201 and response.json()["episodes"] == 3
    assert Annotation.objects.count() == 3
    bulk_id = response.json()["id"]
    undo = researcher_api.post(f"/api/annotations/bulk/{bulk_id}/undo/")
    assert undo.json() == {"restored": 3}
    assert not Annotation.objects.exists()
    again = researcher_api.post(f"/api/annotations/bulk/{bulk_id}/undo/")
    assert again.status_code == 400
    assert "already undone" in again.json()["bulk_action"][0]


def test_bulk_actions_are_for_researchers(annotator_api, ran):
    body = {"filters": {"batch": ran.pk}, "label": "approve"}
    assert annotator_api.post("/api/annotations/bulk/", body, format="json").status_code == 403
    assert annotator_api.post("/api/annotations/bulk/preview/", body).status_code == 403
    assert not AnnotationBulkAction.objects.exists()


def test_agreement_reports_kappas(researcher_api, researcher, ran):
    other = factories.client_for(factories.user("otto", "annotator"))
    third = factories.client_for(factories.user("tess", "annotator"))
    labels = {"otto": ["approve", "reject", "approve"], "tess": ["approve", "reject", "reject"]}
    episodes = list(ran.episodes.order_by("pk"))
    for client, name in ((other, "otto"), (third, "tess")):
        for episode, label in zip(episodes, labels[name], strict=True):
            body = {"episode": episode.pk, "label": label, "reason": "other"}
            client.post("/api/annotations/", body)
    data = researcher_api.get("/api/annotations/agreement/", {"batch": ran.pk}).json()
    (pair,) = data["cohen"]
    # po = 2/3; otto 2 approve 1 reject, tess 1 and 2: pe = (2·1 + 1·2)/9 = 4/9.
    assert pair["episodes"] == 3 and pair["kappa"] == pytest.approx((2 / 3 - 4 / 9) / (5 / 9))
    assert data["fleiss"]["raters"] == 2 and data["fleiss"]["episodes"] == 3


def test_annotation_list_query_count_does_not_grow(researcher_api, ran, django_assert_num_queries):
    others = [factories.client_for(factories.user(f"u{i}", "annotator")) for i in range(3)]
    researcher_api.post("/api/annotations/", {"episode": ran.episodes.first().pk, "label": "flag"})
    with django_assert_num_queries(4):  # token, roles, count, page with annotators
        researcher_api.get("/api/annotations/")
    for client in others:
        for episode in ran.episodes.all():
            client.post("/api/annotations/", {"episode": episode.pk, "label": "approve"})
    with django_assert_num_queries(4):
        assert researcher_api.get("/api/annotations/").json()["count"] == 10


def test_a_rejection_without_a_reason_is_refused(annotator_api, researcher_api, ran):
    episode = ran.episodes.first()
    response = annotator_api.post(
        "/api/annotations/", {"episode": episode.pk, "label": "reject"}, format="json"
    )
    assert response.status_code == 400
    assert "a rejection needs a reason" in response.json()["reason"][0]
    assert not Annotation.objects.exists()
    body = {"episode": episode.pk, "label": "reject", "reason": "wrong_evidence"}
    assert annotator_api.post("/api/annotations/", body, format="json").status_code == 201
    bulk = {"filters": {"batch": ran.pk}, "label": "reject", "reason": " "}
    response = researcher_api.post("/api/annotations/bulk/", bulk, format="json")
    assert response.status_code == 400 and "needs a reason" in response.json()["reason"][0]
    assert not AnnotationBulkAction.objects.exists()


# --- the annotation rules hold in the API too (issue 21.5) ---------------------------------


def test_an_episode_another_annotator_holds_cannot_be_labelled_through_the_api(annotator_api, ran):
    taken = annotator_api.post("/api/annotations/next/", {}, format="json").json()
    episode = taken["episode"]["id"] if isinstance(taken["episode"], dict) else taken["episode"]
    second = factories.client_for(factories.user("bea", Role.ANNOTATOR))
    body = {"episode": episode, "label": "approve", "reason": "good_trajectory"}
    refused = second.post("/api/annotations/", body, format="json")
    assert refused.status_code == 400
    (message,) = refused.json()["episode"]
    assert "being labelled by another annotator" in message and "anna" not in message
    # Once the holder has labelled it, the lock is gone and the second label is welcome.
    assert annotator_api.post("/api/annotations/", body, format="json").status_code == 201
    assert second.post("/api/annotations/", body, format="json").status_code == 201


def test_a_bulk_label_without_filters_must_say_it_means_every_episode(researcher_api, ran):
    body = {"filters": {}, "label": "approve", "reason": "good_trajectory"}
    refused = researcher_api.post("/api/annotations/bulk/", body, format="json")
    assert refused.status_code == 400
    assert "every finished episode" in refused.json()["filters"][0]
    assert not Annotation.objects.exists()
    meant = researcher_api.post(
        "/api/annotations/bulk/", {**body, "every_episode": True}, format="json"
    )
    assert meant.status_code == 201
    assert meant.json()["episodes"] == ran.episodes.count()


def test_annotators_do_not_see_the_agreement_between_annotators(client, annotator, researcher):
    client.force_login(annotator)
    assert client.get("/annotate/agreement/").status_code == 403
    assert b"Agreement</a>" not in client.get("/annotate/").content
    client.force_login(researcher)
    assert client.get("/annotate/agreement/").status_code == 200
