"""The annotation card's compact trajectory (issue 33): what the agent did each turn, the
curated-set diff with gold marks, the calls the harness refused, and the full viewer one key
away; its reads are the viewer's replay in three queries, whatever the number of turns."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client

from harness_app.roles import Role
from tests import factories
from trajectories.models import Episode, Turn
from trajectories.selectors.annotation import action_text, trajectory_steps
from trajectories.selectors.turns import gold_for

pytestmark = pytest.mark.django_db


def _card(user: Any) -> tuple[Episode, str]:
    client = Client()
    client.force_login(user)
    response = client.get("/annotate/")
    return response.context["item"].episode, response.content.decode()


def _steps(page: str) -> dict[int, str]:
    """Each turn's line on the card, as text."""
    found = re.findall(r'<li class="step" data-turn="(\d+)">(.*?)</li>', page, flags=re.S)
    return {
        int(turn): " ".join(unescape(re.sub(r"<[^>]+>", " ", body)).split()) for turn, body in found
    }


def test_the_card_shows_each_turns_action_and_diff(ran_batch) -> None:
    episode, page = _card(factories.user("ann", Role.ANNOTATOR))
    steps = _steps(page)
    calls = {t.index: t.tool_calls for t in Turn.objects.filter(episode=episode).exclude(index=0)}
    assert sorted(steps) == sorted(calls)  # one line per turn, the reset left out
    for index, turn_calls in calls.items():
        for call in turn_calls:
            assert call["name"] in steps[index]
    question = episode.query.text
    assert f"search_corpus “{question}”" in steps[1]
    # Curations with their tags and gold marks, removals, retags; the reads and the end.
    gold = {doc for doc, grade in gold_for(query_id=episode.query_id).grades.items() if grade}
    assert "+Ostrel_River fair" in steps[1] and "+Vell_lamp fair ★1" in steps[1]
    assert "Vell_lamp" in gold
    assert "curate +5 −4" in steps[7] and "−Vell_lamp ★1" in steps[7]
    assert "Lune_Water fair→very_high" in steps[7]
    assert "read_document Drannoch_Hills" in steps[3]
    assert "verify" in steps[8] and "Drannoch_Hills unsupported" in steps[8]
    assert steps[9].startswith("9 end_search “curated 5 documents")
    # The full viewer, one key away.
    assert f'data-viewer-url="/episodes/{episode.pk}/"' in page
    assert "<kbd>v</kbd> open the full viewer" in page


def test_refused_calls_and_format_errors_are_on_their_turn(ran_batch) -> None:
    episode = ran_batch.episodes.order_by("pk").first()
    turn = Turn.objects.get(episode=episode, index=3)
    message = "unknown tool 'serch_corpus'; available tools: search_corpus"
    turn.tool_calls = [{"name": "serch_corpus", "arguments": {"q": "x"}, "call_id": "call_0"}]
    turn.tool_results = [
        {"call_id": "call_0", "name": "serch_corpus", "content": "", "ok": False, "error": message}
    ]
    turn.save(update_fields=["tool_calls", "tool_results"])
    Turn.objects.filter(episode=episode, index__gte=3).update(format_errors=1)
    shown, page = _card(factories.user("ann", Role.ANNOTATOR))
    assert shown == episode
    line = _steps(page)[3]
    assert line == f'3 serch_corpus {{"q": "x"}} ⚠ {message}'
    assert "⚠" not in _steps(page)[4]  # the running total is not a new error


def test_the_trajectory_is_three_queries_whatever_its_length(
    ran_batch, django_assert_num_queries
) -> None:
    episode = ran_batch.episodes.order_by("pk").first()
    gold = gold_for(query_id=episode.query_id)
    with django_assert_num_queries(3):  # turns, the curation log, verifications
        steps = trajectory_steps(episode=episode, gold=gold)
    assert len(steps) == episode.turn_rows.count() - 1 > 3


@pytest.mark.parametrize(
    ("call", "text"),
    [
        ({"name": "fan_out_search", "arguments": {"queries": ["a b", "c"]}}, "“a b” · “c”"),
        ({"name": "grep_corpus", "arguments": {"pattern": "(?i)vell"}}, "/(?i)vell/"),
        ({"name": "review_docs", "arguments": {"doc_ids": ["A", "B"]}}, "A, B"),
        ({"name": "curate", "arguments": {"importance": {"A": "high"}}}, "retag 1"),
        ({"name": "curate", "arguments": {}}, "no change asked"),
        ({"name": "end_search", "arguments": {}}, ""),
        ({"name": "search_corpus", "arguments": "not an object"}, '"not an object"'),
        ({"name": "dance", "arguments": {"x": 1}}, '{"x": 1}'),
    ],
)
def test_a_call_in_a_line(call: dict[str, Any], text: str) -> None:
    assert action_text(call) == text
