"""Episodes: the list page's filters with cursor pagination, and one episode in full."""

from __future__ import annotations

import pytest

from tests import factories
from trajectories.models import Episode, ModelCall, Turn, pack_floats, pack_ints
from trajectories.selectors.turns import turn_states
from trajectories.services.annotations import annotation_label

pytestmark = pytest.mark.django_db


@pytest.fixture
def ran(demo_benchmark, baseline_policy):
    return factories.run_batch(demo_benchmark, baseline_policy, queries=2)


def _ids(response) -> list[int]:
    return [row["id"] for row in response.json()["results"]]


def test_list_filters_like_the_page(annotator_api, ran, researcher):
    extra = factories.synthetic_episodes(ran, 4, reward=0.1, status="failed")
    finished = list(ran.episodes.exclude(pk__in=[e.pk for e in extra]))
    annotation_label(annotator=researcher, episode=extra[0], label="reject", reason="format")
    url = "/api/episodes/"
    assert len(_ids(annotator_api.get(url, {"batch": ran.pk}))) == 6
    assert _ids(annotator_api.get(url, {"status": "failed"})) == [e.pk for e in reversed(extra)]
    assert _ids(annotator_api.get(url, {"annotation_status": "rejected"})) == [extra[0].pk]
    high = annotator_api.get(url, {"reward_min": 0.2, "turns_min": 1})
    assert set(_ids(high)) <= {e.pk for e in finished} and len(_ids(high)) == 2
    question = ran.episodes.first().query.text
    assert ran.episodes.first().pk in _ids(annotator_api.get(url, {"q": question[5:25]}))


def test_cursor_pages_through_everything_once(annotator_api, ran):
    factories.synthetic_episodes(ran, 7)
    seen: list[int] = []
    response = annotator_api.get("/api/episodes/", {"page_size": 4})
    while True:
        seen += _ids(response)
        if not response.json()["next"]:
            break
        response = annotator_api.get(response.json()["next"])
    assert seen == sorted(Episode.objects.values_list("pk", flat=True), reverse=True)


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"rewrd_min": "1"}, "rewrd_min", "unknown filter; use one of batch"),
        ({"reward_min": "high"}, "reward_min", "expected a number, got 'high'"),
        ({"status": "done"}, "status", "'done' is not one of pending, running"),
        (
            {"batch": "first"},
            "batch",
            "expected a positive whole-number id below 2^63, got 'first'",
        ),
        ({"turns_min": "9", "turns_max": "2"}, "turns_min", "9.0 is above turns_max 2.0"),
    ],
)
def test_bad_filters_name_the_parameter(annotator_api, params, field, message):
    response = annotator_api.get("/api/episodes/", params)
    assert response.status_code == 400
    assert message in response.json()[field][0]


def test_list_query_count_does_not_grow_with_rows(annotator_api, ran, django_assert_num_queries):
    with django_assert_num_queries(3):  # token, roles, one page
        few = annotator_api.get("/api/episodes/", {"reward_min": 0})
    factories.synthetic_episodes(ran, 30)
    with django_assert_num_queries(3):
        many = annotator_api.get("/api/episodes/", {"reward_min": 0})
    assert len(_ids(many)) > len(_ids(few))


def test_detail_has_every_turn_with_full_state_and_model_calls(
    annotator_api, ran, django_assert_max_num_queries
):
    episode = ran.episodes.order_by("pk").first()
    ModelCall.objects.create(
        episode=episode,
        turn_index=0,
        request={"prompt": [1, 2]},
        response={"choices": [{"text": "hi"}]},
        prompt_token_ids_blob=pack_ints([1, 2]),
        completion_token_ids_blob=pack_ints([3]),
        completion_logprobs_blob=pack_floats([-0.25]),
    )
    with django_assert_max_num_queries(6):
        data = annotator_api.get(f"/api/episodes/{episode.pk}/").json()
    turns = data["turn_rows"]
    assert [t["index"] for t in turns] == list(
        Turn.objects.filter(episode=episode).values_list("index", flat=True)
    )
    assert [t["state"] for t in turns] == turn_states(episode=episode)  # deltas applied
    (call,) = data["model_calls"]
    assert call["prompt_token_ids"] == [1, 2] and call["completion_logprobs"] == [-0.25]
    assert data["metrics"]["curated_recall"] == episode.curated_recall


def test_unknown_episode_is_404(annotator_api, db):
    assert annotator_api.get("/api/episodes/424242/").status_code == 404


def test_reward_hacking_list_is_researcher_readable(researcher_api, ran, researcher):
    episode = ran.episodes.first()
    annotation_label(annotator=researcher, episode=episode, label="reject", reason="format")
    data = researcher_api.get("/api/episodes/reward-hacking/", {"min_reward": -1}).json()
    assert [row["id"] for row in data] == [episode.pk]
    bad = researcher_api.get("/api/episodes/reward-hacking/", {"min_reward": "lots"})
    assert bad.json() == {"min_reward": ["expected a finite number, got 'lots'"]}
