"""A policy config's tool parser reaches the chat policy: a gpt-oss policy that writes its
calls in Harmony acts on them, end to end through `episode_run` as a worker runs it."""

from __future__ import annotations

from typing import Any

import pytest

from harness_app.harness.llm.tool_parsers import TOOL_PARSERS
from harness_app.models import PolicyConfig, PolicyKind, ToolParser
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import Episode
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db

_CALL = "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>"
HARMONY_REPLIES = [
    "<|channel|>analysis<|message|>Find the lamp's inventor first.<|end|><|start|>assistant"
    + _CALL.format(name="search_corpus", args='{"query": "Vell lamp inventor"}'),
    _CALL.format(name="end_search", args="{}"),
]


def _play(benchmark: Any, **policy: Any) -> tuple[Episode, list[dict[str, Any]]]:
    def reply(n: int, body: dict[str, Any]) -> str:
        return HARMONY_REPLIES[min(n - 1, len(HARMONY_REPLIES) - 1)]

    with FakeOpenAIServer(reply=reply) as fake:
        config = PolicyConfig.objects.create(
            name="gpt-oss", kind=PolicyKind.OPENAI, base_url=fake.base_url, model="m", **policy
        )
        batch = batch_create(benchmark=benchmark, policy=config, query_limit=1, max_turns=3)
        episode = batch.episodes.get()
        episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    completions = [r["body"] for r in fake.requests if r["path"].endswith("/completions")]
    return episode, completions


def test_a_harmony_policy_acts_on_its_calls(demo_benchmark):
    episode, completions = _play(demo_benchmark, tool_parser=ToolParser.HARMONY)
    assert episode.termination_reason == "end_search"
    assert episode.format_errors == 0
    assert all(body["skip_special_tokens"] is False for body in completions)


def test_the_same_policy_under_the_default_parser_reads_no_calls(demo_benchmark):
    episode, completions = _play(demo_benchmark)
    assert PolicyConfig.objects.get(name="gpt-oss").tool_parser == ToolParser.HERMES
    assert episode.termination_reason == "format_errors" and episode.format_errors == 3
    assert all("skip_special_tokens" not in body for body in completions)


def test_the_django_choices_are_the_harness_parsers():
    assert set(ToolParser.values) == set(TOOL_PARSERS)


def test_the_policy_api_sets_and_checks_the_parser(researcher_api):
    body = {"name": "oss", "kind": "openai", "model": "gpt-oss-20b", "tool_parser": "harmony"}
    with FakeOpenAIServer(model="gpt-oss-20b") as served:  # saving asks for its models
        body["base_url"] = served.base_url
        response = researcher_api.post("/api/policies/", body, format="json")
    assert response.status_code == 201 and response.json()["tool_parser"] == "harmony"
    bad = researcher_api.post("/api/policies/", {**body, "tool_parser": "xml"}, format="json")
    assert bad.status_code == 400 and bad.json()["tool_parser"] == ['"xml" is not a valid choice.']
