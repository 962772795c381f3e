"""Budget: the token estimate and the marker's warnings at 60, 75 and 90 %."""

from __future__ import annotations

import pytest

from harness_app.harness.ablation import Ablation
from harness_app.harness.budget import BudgetStatus, estimate_tokens, render_budget
from tests.harness.fakes import call, make_env


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
