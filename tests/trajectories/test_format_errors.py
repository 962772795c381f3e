"""Malformed tool calls from the model are recorded as format errors, end to end.

A scripted OpenAI-compatible server (tests/fakes/openai_server.py) answers each call with
the next reply; the episode runs here through `episode_run`, as a worker would run it.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import Episode, EpisodeStatus, ModelCall, Turn
from trajectories.rollout import episode_run
from trajectories.selectors.episode import episode_view
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db

SEARCH = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
# The fake JSON-encodes each reply, so a plain string arrives as a JSON string, not an
# action object.
NOT_AN_ACTION = "I would search for the lamp's inventor next"
MISSING_ARGUMENT = {"tool": "search_corpus", "arguments": {}}
UNKNOWN_TOOL = {"tool": "teleport", "arguments": {"to": "Tamsbury"}}


def _run(
    benchmark: Benchmark, replies: list[Any], fmt: str = "json_schema", **batch: Any
) -> Episode:
    with FakeOpenAIServer(actions=replies, token_ids=[1, 2, 3]) as fake:
        policy = PolicyConfig.objects.create(
            name="scripted",
            kind=PolicyKind.OPENAI,
            base_url=fake.base_url,
            model="scripted",
            tool_call_format=fmt,
        )
        created = batch_create(benchmark=benchmark, policy=policy, query_limit=1, **batch)
        episode = created.episodes.get()
        episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    return episode


def _turns(episode: Episode) -> list[Turn]:
    return list(Turn.objects.filter(episode=episode).order_by("index"))


def test_three_malformed_turns_in_a_row_end_the_episode_as_format_errors(demo_benchmark):
    replies = [
        SEARCH,
        NOT_AN_ACTION,
        MISSING_ARGUMENT,
        SEARCH,  # a good turn in between breaks the streak
        NOT_AN_ACTION,
        MISSING_ARGUMENT,
        UNKNOWN_TOOL,
        SEARCH,  # never asked for: the episode has ended
    ]
    episode = _run(demo_benchmark, replies)

    assert episode.status == EpisodeStatus.COMPLETED  # the model misbehaved, not the system
    assert episode.termination_reason == "format_errors"
    assert episode.format_errors == 5
    assert episode.metrics["format_errors"] == 5
    # Turns as Harness-1 counts them: the two searches; format-error turns do not count.
    assert episode.turns == 2
    # An episode ended by format failures scores -0.5 outright, and says so.
    assert episode.reward == -0.5 and episode.reward_components["format_failure"] is True

    turns = _turns(episode)
    assert [t.index for t in turns] == list(range(8))  # turn 0 is the opening observation
    # Turn.format_errors is the episode's count so far, like the recall columns beside it.
    assert [t.format_errors for t in turns] == [0, 0, 1, 2, 2, 3, 4, 5]
    failed = [t.index for t in turns if any(not r.get("ok", True) for r in t.tool_results)]
    assert failed == [2, 3, 5, 6, 7]
    # The viewer shows each turn's own errors, not the total so far.
    shown = episode_view(episode=episode).turns
    assert [t.format_errors for t in shown] == [0, 0, 1, 1, 0, 1, 1, 1]

    # What the model sent is kept as it was, and what was wrong is what it sees next.
    not_an_action, missing_argument, unknown_tool = turns[5], turns[6], turns[7]
    assert not_an_action.tool_calls[0]["name"] == ""
    assert NOT_AN_ACTION in not_an_action.tool_calls[0]["arguments"]
    assert "ERROR: unknown tool ''" in not_an_action.observation
    assert "ERROR: missing required field 'query'" in missing_argument.observation
    assert unknown_tool.tool_calls[0] == {
        "name": "teleport",
        "arguments": {"to": "Tamsbury"},
        "call_id": "call_0",
    }
    assert "ERROR: unknown tool 'teleport'; available tools: search_corpus" in (
        unknown_tool.observation
    )
    assert "ENDED: format_errors" in unknown_tool.observation


def test_every_model_call_behind_the_format_errors_is_stored_token_faithful(demo_benchmark):
    replies = [SEARCH, NOT_AN_ACTION, MISSING_ARGUMENT, UNKNOWN_TOOL]
    episode = _run(demo_benchmark, replies)
    assert episode.termination_reason == "format_errors"

    calls = list(ModelCall.objects.filter(episode=episode).order_by("turn_index", "pk"))
    # One generation per turn, filed under the turn whose observation it answered.
    assert [c.turn_index for c in calls] == [0, 1, 2, 3]
    contents = [c.response["choices"][0]["message"]["content"] for c in calls]
    assert contents[1] == f'"{NOT_AN_ACTION}"'  # the broken reply, verbatim
    assert contents[3] == '{"tool": "teleport", "arguments": {"to": "Tamsbury"}}'
    for call in calls:
        assert call.error == ""
        assert call.finish_reason == "stop"
        assert call.completion_token_ids == [1, 2, 3]
        assert len(call.completion_logprobs) == 3
        assert len(call.prompt_token_ids) == call.usage["prompt_tokens"]


# openai_tools format: the calls are hermes <tool_call> blocks in the reply.
BROKEN_BLOCK = "<tool_call>search_corpus(query=Vell lamp inventor)</tool_call>"
PROSE = "The inventor was probably Edda Vell."


def test_unparseable_tool_call_blocks_and_prose_are_format_errors_under_max_turns(
    demo_benchmark,
):
    episode = _run(demo_benchmark, [BROKEN_BLOCK, PROSE, BROKEN_BLOCK], fmt="openai_tools")
    assert (episode.status, episode.termination_reason) == (
        EpisodeStatus.COMPLETED,
        "format_errors",
    )
    assert episode.format_errors == 3
    turns = _turns(episode)
    assert "search_corpus(query=Vell lamp inventor)" in turns[1].tool_calls[0]["arguments"]
    assert PROSE in turns[2].tool_calls[0]["arguments"]  # fed back, not dropped
    assert ModelCall.objects.filter(episode=episode).count() == 3


def test_prose_ends_a_last_tool_episode_without_a_format_error(demo_benchmark):
    episode = _run(demo_benchmark, [PROSE], fmt="openai_tools", termination_policy="last_tool")
    assert (episode.status, episode.termination_reason) == (
        EpisodeStatus.COMPLETED,
        "no_tool_call",
    )
    assert episode.format_errors == 0
    assert ModelCall.objects.filter(episode=episode).count() == 1  # the reply is kept
