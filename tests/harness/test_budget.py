"""Budget: the token estimate or real count, the marker's warnings at 60, 75 and 90 %, and
who counts in each context mode."""

from __future__ import annotations

import re

import pytest

from harness_app.harness.ablation import Ablation
from harness_app.harness.budget import (
    BudgetStatus,
    context_marker,
    estimate_tokens,
    render_budget,
)
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from tests.harness.fakes import QUESTION, FakeRetriever, call, make_env


def test_tokens_are_characters_over_four_rounded_up():
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5)] == [0, 1, 1, 2]


@pytest.mark.parametrize(
    ("turn", "level"),
    [(23, None), (24, 0.60), (29, 0.60), (30, 0.75), (35, 0.75), (36, 0.90), (40, 0.90)],
)
def test_turn_warnings_start_at_each_threshold(turn, level):
    assert BudgetStatus(turn, 40, 0, 32768).warning_level() == level


def test_the_tighter_budget_drives_the_warning():
    status = BudgetStatus(turn=2, max_turns=40, tokens_used=25_000, token_limit=32_768)
    text = render_budget(status)
    assert text.startswith("BUDGET turn 2/40 · ~25.0k/32.8k tokens (76%)")
    assert "WARNING 76% of context budget used" in text


def test_no_warning_below_sixty_percent():
    assert "\n" not in render_budget(BudgetStatus(10, 40, 100, 32768))


def test_marker_in_working_memory_warns_as_turns_run_out():
    env = make_env(max_turns=10)
    texts = [
        env.step([call("search_corpus", {"query": "engine"})]).working_memory for _ in range(9)
    ]
    warned = ["WARNING" in t for t in texts]
    assert warned == [False] * 5 + [True] * 4
    assert "90% of turns budget used: finish now" in texts[8]


def test_marker_is_absent_when_ablated():
    env = make_env(Ablation().without("budget_marker"), max_turns=10)
    for _ in range(8):
        obs = env.step([call("search_corpus", {"query": "engine"})])
    assert "BUDGET" not in obs.working_memory and "WARNING" not in obs.working_memory


def test_a_policy_that_keeps_only_the_latest_working_memory_is_charged_for_one():
    full, latest = make_env(), make_env(wm_in_history=False)
    reset_wm = full.state.tokens_used
    wms = []
    for query in ("engine", "loom", "Turing"):
        wms.append(
            estimate_tokens(full.step([call("search_corpus", {"query": query})]).working_memory)
        )
        latest.step([call("search_corpus", {"query": query})])
    # Same actions and results; only the stale WMs (reset's and all but the last) differ.
    assert full.state.tokens_used - latest.state.tokens_used == reset_wm + sum(wms[:-1])
    assert latest.state.wm_tokens == wms[-1]


# -- real tokens and the two context modes ---------------------------------------------------


def words(text: str) -> int:
    """A stand-in tokenizer whose counts differ from chars/4: one token per word."""
    return len(text.split())


def test_a_token_counter_replaces_the_estimate_and_the_marker_drops_its_tilde():
    env = SearchHarness(FakeRetriever(), token_counter=words)
    reset = env.reset(QUESTION)
    assert env.state.tokens_used == words(reset.working_memory)
    before = env.state.tokens_used
    obs = env.step([call("search_corpus", {"query": "engine"})])
    results = obs.text.removesuffix(obs.working_memory).rstrip("\n")
    expected = before + words('search_corpus{"query": "engine"}') + words(results)
    assert env.state.tokens_used == expected + words(obs.working_memory)
    assert re.search(r"BUDGET turn 1/40 · \d+/32\.8k tokens", obs.working_memory)


def test_without_a_tokenizer_the_count_is_the_estimate_marked_with_a_tilde():
    obs = make_env().step([call("search_corpus", {"query": "engine"})])
    assert re.search(r"BUDGET turn 1/40 · ~\d+ ?\S*/32\.8k tokens", obs.working_memory)


def test_the_real_count_drives_the_context_budget():
    def heavy(text: str) -> int:
        return len(text)  # a tokenizer four times as dense as the estimate

    estimated = make_env(context_token_limit=1500)
    counted = SearchHarness(
        FakeRetriever(), config=HarnessConfig(context_token_limit=1500), token_counter=heavy
    )
    counted.reset(QUESTION)
    action = [call("search_corpus", {"query": "engine"})]
    assert not estimated.step(action).done
    obs = counted.step(action)
    assert obs.done and obs.termination_reason == "context_budget"


def test_in_rerender_mode_the_env_counts_nothing_and_never_ends_on_context():
    counted: list[str] = []

    def counter(text: str) -> int:
        counted.append(text)
        return 10**6

    config = HarnessConfig(context_mode="rerender", context_token_limit=10)
    env = SearchHarness(FakeRetriever(), config=config, token_counter=counter)
    env.set_token_counter(counter)
    env.reset(QUESTION)
    for query in ("engine", "loom", "Babbage"):
        obs = env.step([call("search_corpus", {"query": query})])
        assert not obs.done
    assert counted == [] and env.state.tokens_used == 0
    [line] = [x for x in obs.working_memory.splitlines() if x.startswith("BUDGET")]
    assert line == "BUDGET turn 3/40"  # the policy's marker shows the context


def test_a_bad_context_mode_names_the_field():
    with pytest.raises(ValueError, match=r"HarnessConfig\.context_mode must be one of append"):
        HarnessConfig(context_mode="rolling")


@pytest.mark.parametrize(
    ("used", "expected"),
    [
        (1000, "[Context: 1000/30720]"),
        (18_432, "[Context: 18432/30720] 60% of the context used: prefer curating"),
        (23_040, "[Context: 23040/30720] 75% of the context used: stop exploring"),
        (27_648, "[Context: 27648/30720] 90% of the context used: call end_search now"),
    ],
)
def test_the_context_marker_is_flagged_at_60_75_and_90_percent(used, expected):
    assert context_marker(used).startswith(expected)
