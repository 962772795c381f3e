"""The episode runner: turn records as they happen, termination, metrics and reward."""

from __future__ import annotations

import json

import pytest

from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.policies import PolicyError
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.reward import RewardWeights
from harness_app.harness.runner import (
    POLICY_ERROR,
    RUNNER_TURN_CAP,
    EpisodeRun,
    iter_episode,
    run_episode,
)
from harness_app.harness.types import Observation, ToolCall
from tests.harness.test_baseline import CORPUS, QUESTION


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BM25Index.build(CORPUS, tmp_path_factory.mktemp("runner") / "index")


class Scripted:
    """Plays a fixed list of turns, then repeats the last one."""

    name = "scripted"

    def __init__(self, turns: list[list[ToolCall]]) -> None:
        self.turns = turns
        self.seen: list[int] = []
        self.question = ""

    def reset(self, query_text: str) -> None:
        self.question = query_text
        self.seen = []

    def act(self, observation: Observation, state: object) -> list[ToolCall]:
        self.seen.append(observation.turn)
        return self.turns[min(len(self.seen), len(self.turns)) - 1]


SEARCH = [ToolCall("search_corpus", {"query": "Glass Harbour opera"}, "c1")]
CURATE = [ToolCall("curate", {"add_ids": ["Glass_Harbour_opera"]}, "c2")]
END = [ToolCall("end_search", {"reasoning": "done"}, "c3")]


def env_for(index, **config) -> SearchHarness:
    return SearchHarness(index, config=HarnessConfig(auto_seed_count=0, **config))


def test_records_start_at_reset_and_follow_each_turn(index):
    records = list(iter_episode(env_for(index), Scripted([SEARCH, CURATE, END]), QUESTION))
    assert [r.turn for r in records] == [0, 1, 2, 3]
    assert records[0].tool_calls == [] and "QUESTION:" in records[0].observation_text
    assert records[1].tool_calls[0]["name"] == "search_corpus"
    assert records[3].done and records[3].termination_reason == "end_search"
    assert [r.state["turn"] for r in records] == [0, 1, 2, 3]  # snapshot taken that turn


def test_recall_so_far_rises_when_the_policy_curates(index):
    records = list(iter_episode(env_for(index), Scripted([SEARCH, CURATE, END]), QUESTION))
    curated = [r.recall.curated for r in records]
    assert curated == [0.0, 0.0, 0.5, 0.5]  # 1 of 2 relevant docs, from turn 2 on
    assert records[1].recall.trajectory == 0.5  # the search showed the opera, not Ostrova
    assert records[1].recall.final_answer == 0.0


def test_result_scores_the_final_state(index):
    result = run_episode(env_for(index), Scripted([SEARCH, CURATE, END]), QUESTION)
    assert result.termination_reason == "end_search"
    assert result.curated_ids == ["Glass_Harbour_opera"]
    assert result.metrics.turns == 2  # the end_search-only turn does not count
    assert result.metrics.tool_diversity == 2  # search_corpus and curate
    assert result.reward.answer_hit == 0.0  # the answer doc was never curated
    assert result.reward.total == pytest.approx(result.reward.raw)
    assert result.policy == "scripted"


def test_result_and_records_are_json_ready(index):
    result = run_episode(env_for(index), Scripted([SEARCH, CURATE, END]), QUESTION)
    data = json.loads(json.dumps(result.to_json()))
    assert len(data["turns"]) == 4
    assert data["turns"][2]["recall"]["curated"] == 0.5
    assert "turns" not in result.to_json(with_turns=False)


def test_durations_are_recorded_per_turn(index):
    records = list(iter_episode(env_for(index), Scripted([SEARCH, END]), QUESTION))
    assert all(r.policy_seconds >= 0 and r.env_seconds >= 0 for r in records)
    assert records[0].policy_seconds == 0.0  # the reset involves no policy call


def test_environment_budget_ends_a_policy_that_never_stops(index):
    result = run_episode(env_for(index, max_turns=3), Scripted([SEARCH]), QUESTION)
    assert result.termination_reason == "max_turns"
    assert len(result.turns) == 4


def test_runner_cap_stops_before_the_environment_budget(index):
    result = run_episode(env_for(index), Scripted([SEARCH]), QUESTION, max_turns=2)
    assert result.termination_reason == RUNNER_TURN_CAP
    assert result.metrics.turns == 2


class Failing(Scripted):
    def act(self, observation: Observation, state: object) -> list[ToolCall]:
        if observation.turn >= 1:
            raise PolicyError("model server unreachable")
        return SEARCH


class Stopping(Scripted):
    def act(self, observation: Observation, state: object) -> list[ToolCall]:
        error = PolicyError("reply had no tool call")
        error.reason = "no_tool_call"
        raise error


def test_policy_error_ends_the_episode_with_its_message(index):
    result = run_episode(env_for(index), Failing([]), QUESTION)
    assert result.termination_reason == POLICY_ERROR
    assert result.error == "model server unreachable"
    assert len(result.turns) == 2  # reset and the one search that happened
    assert result.reward.empty_set  # nothing curated: -0.2
    assert result.reward.total == -0.2


def test_policy_error_reason_becomes_the_termination_reason(index):
    result = run_episode(env_for(index), Stopping([]), QUESTION)
    assert result.termination_reason == "no_tool_call"


def test_result_plays_the_episode_out_when_not_iterated(index):
    run = iter_episode(env_for(index), Scripted([SEARCH, END]), QUESTION)
    assert run.result().termination_reason == "end_search"


def test_an_episode_run_cannot_be_replayed(index):
    run = EpisodeRun(env_for(index), Scripted([SEARCH, END]), QUESTION)
    list(run)
    with pytest.raises(RuntimeError, match="only once"):
        list(run)


def test_turn_penalty_uses_the_environment_budget(index):
    weights = RewardWeights(turn_penalty=0.15, turn_penalty_free_turns=1)
    result = run_episode(
        env_for(index, max_turns=5), Scripted([SEARCH, CURATE, END]), QUESTION, weights=weights
    )
    # 2 counted turns (end_search alone does not count), 1 free, T_max 5:
    # 0.15 * (2 - 1) / (5 - 1) = 0.0375
    assert result.reward.turn_penalty == pytest.approx(-0.0375)
    # Counting every step, as before: 3 turns, 0.15 * (3 - 1) / (5 - 1) = 0.075
    every = run_episode(
        env_for(index, max_turns=5, count_every_step=True),
        Scripted([SEARCH, CURATE, END]),
        QUESTION,
        weights=weights,
    )
    assert every.reward.turn_penalty == pytest.approx(-0.075)


def test_abandoned_episode_is_scored_as_it_stands(index):
    # A cancelled rollout stops iterating after the first search and still gets a result.
    run = iter_episode(env_for(index), Scripted([SEARCH, CURATE, END]), QUESTION)
    for record in run:
        if record.turn == 1:
            break
    result = run.result()
    assert result.metrics.turns == 1
    assert result.termination_reason == ""  # neither the env nor the policy ended it
    assert result.seconds > 0


class Silent(Scripted):
    def act(self, observation: Observation, state: object) -> list[ToolCall]:
        raise PolicyError()


def test_policy_error_without_a_message_still_ends_the_episode(index):
    result = run_episode(env_for(index), Silent([]), QUESTION)
    assert result.termination_reason == POLICY_ERROR
    assert result.error == "PolicyError"
    assert len(result.turns) == 1


BAD = [ToolCall("search_corpus", {"q": "misspelt field"}, "c4")]


def test_an_episode_ended_by_format_failures_scores_minus_half(index):
    result = run_episode(env_for(index), Scripted([SEARCH, CURATE, BAD]), QUESTION)
    assert result.termination_reason == "format_errors"
    assert result.metrics.curated_recall == 0.5  # it had curated something useful
    assert result.reward.format_failure and result.reward.total == -0.5
    assert result.to_json()["reward"]["format_failure"] is True
    # The format-error turns did not count as turns.
    assert result.metrics.turns == 2 and len(result.turns) == 6
    # With the term switched off the same episode is scored on what it curated.
    off = RewardWeights(format_failure_reward=None)
    plain = run_episode(env_for(index), Scripted([SEARCH, CURATE, BAD]), QUESTION, weights=off)
    assert not plain.reward.format_failure and plain.reward.total > 0


def test_a_runner_capped_at_max_steps_never_cuts_an_episode_the_harness_would_continue(index):
    config = HarnessConfig(auto_seed_count=0, max_turns=2)
    # Two format failures before every counted turn: 2 counted turns take 6 steps.
    script = [BAD, BAD, SEARCH, BAD, BAD, SEARCH]
    result = run_episode(
        SearchHarness(index, config=config), Scripted(script), QUESTION, max_turns=config.max_steps
    )
    assert result.termination_reason == "max_turns"
    assert result.metrics.turns == 2 and len(result.turns) == 7
