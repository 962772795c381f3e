"""Harness-1 reward: every expected value is worked out by hand in the comments."""

from __future__ import annotations

import json

import pytest

from harness_app.harness.metrics import episode_metrics
from harness_app.harness.reward import (
    RewardConfigError,
    RewardWeights,
    compute_reward,
    turn_penalty,
)
from harness_app.harness.types import QuerySpec

QUERY = QuerySpec("q1", "question", "X", {"answer": 2, "bridge": 1})
FOUR_TOOLS = {"search_corpus": 2, "fan_out_search": 1, "curate": 1, "verify": 1, "end_search": 1}


def metrics(curated, shown, tools=None, turns=5):
    return episode_metrics(
        curated_ids=curated,
        shown_ids=shown,
        tool_counts=tools or {},
        turns=turns,
        format_errors=0,
        query=QUERY,
    )


def test_good_episode_sums_every_component():
    m = metrics({"answer", "noise"}, {"answer", "bridge", "noise", "other"}, FOUR_TOOLS)
    r = compute_reward(m, max_turns=40)
    # R = 1/2, P = 1/2, F2 = 5·0.25 / (4·0.5 + 0.5) = 1.25/2.5 = 0.5 -> 0.7·0.5 = 0.35
    assert r.f_beta == pytest.approx(0.35)
    assert r.trajectory_recall == pytest.approx(0.3)  # TR = 2/2 -> 0.3·1
    assert r.answer_hit == 1.0  # FA = 1 > 0
    assert r.final_answer_recall == pytest.approx(0.8)  # 0.8·1
    assert r.trajectory_final_answer_recall == pytest.approx(0.4)  # 0.4·1
    assert r.missed_answer == 0.0  # TFA - FA = 0
    assert r.turn_penalty == 0.0  # 5 turns, and P = 0 by default
    assert r.diversity == pytest.approx(0.5 * 4 / 6)  # U = 4 (end_search excluded)
    assert r.diversity_shortfall == pytest.approx(-0.16)  # -0.08·(6 - 4)
    # 0.35 + 0.3 + 1 + 0.8 + 0.4 + 0.3333 - 0.16 = 3.02333
    assert r.total == pytest.approx(3.0233333, abs=1e-6)
    assert not r.empty_set


def test_answer_seen_but_not_curated_is_charged():
    m = metrics({"bridge"}, {"bridge", "answer"}, {"search_corpus": 1})
    r = compute_reward(m, max_turns=40)
    # R = 0.5, P = 1, F2 = 5·0.5/(4 + 0.5) = 0.5556 -> 0.7·0.5556 = 0.38889
    # TR = 1 -> 0.3; FA = 0 -> no hit, 0; TFA = 1 -> 0.4; missed = -0.35·(1 - 0) = -0.35
    # U = 1: +0.5/6 = 0.08333, shortfall -0.08·5 = -0.4
    # 0.38889 + 0.3 + 0.4 - 0.35 + 0.08333 - 0.4 = 0.42222
    assert r.missed_answer == pytest.approx(-0.35)
    assert r.answer_hit == 0.0
    assert r.total == pytest.approx(0.422222, abs=1e-6)


def test_total_never_drops_below_the_floor():
    m = metrics({"noise"}, {"noise"})
    r = compute_reward(m, max_turns=40)
    # Every positive term is 0; U = 0 gives -0.08·6 = -0.48, floored to 0.001
    assert r.raw == pytest.approx(-0.48)
    assert r.total == 0.001


def test_empty_curated_set_scores_minus_point_two_whatever_was_seen():
    m = metrics(set(), {"answer", "bridge"}, FOUR_TOOLS)
    r = compute_reward(m, max_turns=40)
    assert r.empty_set
    assert r.total == -0.2  # below the 0.001 floor on purpose: curating nothing is worse


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (10, 0.0),
        (24, 0.0),  # the free allowance ends at 24
        (30, 0.15 * 6 / 16),  # (30 - 24)/(40 - 24) = 0.375 of P -> 0.05625
        (40, 0.15),  # full P at T_max
        (55, 0.15),  # capped beyond T_max
    ],
)
def test_library_default_turn_penalty_ramps_after_24_turns(turns, expected):
    assert turn_penalty(turns, 40, RewardWeights.library_default()) == pytest.approx(expected)


def test_released_rl_settings_charge_nothing_for_turns():
    assert turn_penalty(40, 40, RewardWeights()) == 0.0


def test_turn_penalty_enters_the_total():
    base = metrics({"answer"}, {"answer"}, FOUR_TOOLS, turns=20)
    long = metrics({"answer"}, {"answer"}, FOUR_TOOLS, turns=30)
    weights = RewardWeights.library_default()
    short_r = compute_reward(base, max_turns=40, weights=weights)
    long_r = compute_reward(long, max_turns=40, weights=weights)
    assert long_r.turn_penalty == pytest.approx(-0.05625)
    assert short_r.total - long_r.total == pytest.approx(0.05625)


def test_budget_inside_free_turns_charges_full_penalty_on_overrun():
    weights = RewardWeights(turn_penalty=0.2, turn_penalty_free_turns=24)
    assert turn_penalty(25, 20, weights) == 0.2


def test_six_distinct_tools_earn_full_diversity_and_no_shortfall():
    tools = dict.fromkeys(
        ["search_corpus", "fan_out_search", "grep_corpus", "read_document", "curate", "verify"],
        1,
    )
    r = compute_reward(metrics({"answer"}, {"answer"}, tools), max_turns=40)
    assert r.diversity == 0.5
    assert r.diversity_shortfall == 0.0


def test_custom_weights_change_the_total():
    m = metrics({"answer"}, {"answer"}, FOUR_TOOLS)
    plain = compute_reward(m, max_turns=40).total
    no_hit = compute_reward(m, max_turns=40, weights=RewardWeights(answer_hit=0.0)).total
    assert plain - no_hit == pytest.approx(1.0)


def test_beta_weight_recomputes_f_beta():
    m = metrics({"answer", "n1", "n2", "n3"}, set())  # P = 0.25, R = 0.5
    r = compute_reward(m, max_turns=40, weights=RewardWeights(beta=1.0, f_beta=1.0))
    assert r.f_beta == pytest.approx(1 / 3)  # F1 = 2·0.125/0.75


def test_weights_round_trip_through_json():
    weights = RewardWeights.library_default()
    assert RewardWeights.from_json(json.loads(json.dumps(weights.to_json()))) == weights
    assert RewardWeights.from_json({"turn_penalty": 0.15}) == weights  # partial keeps defaults


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"turn_penalti": 0.1}, "unknown reward weight.*turn_penalti"),
        ({"f_beta": "high"}, "'f_beta' must be a number"),
        ({"beta": 0}, "'beta' must be positive"),
        ({"diversity_target": 0}, "'diversity_target' must be >= 1"),
        ({"floor": float("nan")}, "'floor' must be finite"),
        ({"answer_hit": True}, "'answer_hit' must be a number"),
        ({"turn_penalty_free_turns": -1}, "'turn_penalty_free_turns' must be >= 0"),
    ],
)
def test_bad_weights_say_which_field(data, message):
    with pytest.raises(RewardConfigError, match=message):
        RewardWeights.from_json(data)


def test_weights_json_must_be_an_object():
    with pytest.raises(RewardConfigError, match="JSON object"):
        RewardWeights.from_json([0.7])  # type: ignore[arg-type]


def test_breakdown_serialises_every_component():
    r = compute_reward(metrics({"answer"}, {"answer"}, FOUR_TOOLS), max_turns=40)
    data = json.loads(json.dumps(r.to_json()))
    assert set(data) >= {"f_beta", "missed_answer", "turn_penalty", "diversity", "total"}
    assert data["total"] == pytest.approx(r.total)


# -- format failures (issue 17, item 2) -----------------------------------------------------


def test_an_episode_ended_by_format_failures_scores_minus_half_outright():
    good = metrics({"answer"}, {"answer"}, FOUR_TOOLS)  # would score well above 0
    r = compute_reward(good, max_turns=40, termination_reason="format_errors")
    assert r.format_failure and not r.empty_set
    assert r.total == r.raw == -0.5
    assert r.f_beta == 0.0  # the breakdown says why: no term was scored
    assert json.loads(json.dumps(r.to_json()))["format_failure"] is True
    # Even with nothing curated, the format failure is what scores.
    assert (
        compute_reward(
            metrics(set(), set()), max_turns=40, termination_reason="format_errors"
        ).total
        == -0.5
    )


def test_format_failure_term_switched_off_scores_the_episode_normally():
    m = metrics({"answer"}, {"answer"}, FOUR_TOOLS)
    off = RewardWeights(format_failure_reward=None)
    r = compute_reward(m, max_turns=40, weights=off, termination_reason="format_errors")
    assert not r.format_failure
    assert r.total == compute_reward(m, max_turns=40).total
    assert RewardWeights.from_json({"format_failure_reward": None}) == off
    # Other endings are never charged.
    assert not compute_reward(m, max_turns=40, termination_reason="max_turns").format_failure


# -- presets (issue 17, item 8) -------------------------------------------------------------


def test_harness1_preset_is_the_papers_reward_for_40_turn_episodes():
    w = RewardWeights.preset("harness1")
    two_tools = {"search_corpus": 3, "curate": 1, "end_search": 1}
    m = metrics({"answer"}, {"answer"}, two_tools, turns=30)
    r = compute_reward(m, max_turns=40, weights=w)
    assert r.diversity == pytest.approx(0.25 * 2 / 6)  # +0.25·min(U/6, 1), U = 2
    assert r.diversity_shortfall == pytest.approx(-0.08 * 4)  # -0.08·max(0, 6 - U)
    assert r.turn_penalty == pytest.approx(-0.02 * 10 / 20)  # 0.02·min((t-20)/20, 1)
    for turns, expected in [(20, 0.0), (21, 0.001), (40, 0.02), (45, 0.02)]:
        assert turn_penalty(turns, 40, w) == pytest.approx(expected)
    assert compute_reward(metrics(set(), set()), max_turns=40, weights=w).total == -0.2
    assert (
        compute_reward(m, max_turns=40, weights=w, termination_reason="format_errors").total == -0.5
    )


def test_presets_by_name_and_in_weights_json():
    assert RewardWeights.preset("default") == RewardWeights()
    assert RewardWeights.preset("library_default") == RewardWeights.library_default()
    assert RewardWeights.from_json("harness1") == RewardWeights.harness1()
    # A mapping may name a preset and override some of its weights.
    tuned = RewardWeights.from_json({"preset": "harness1", "turn_penalty": 0.05})
    assert tuned.turn_penalty == 0.05 and tuned.diversity == 0.25
    # Stored weights are the resolved ones, so they round-trip without the name.
    assert RewardWeights.from_json(tuned.to_json()) == tuned


@pytest.mark.parametrize("data", ["harness2", {"preset": "paper"}, {"preset": 3}])
def test_an_unknown_preset_lists_the_known_ones(data):
    with pytest.raises(
        RewardConfigError, match=r"unknown reward preset.*default, harness1, library_default"
    ):
        RewardWeights.from_json(data)
