"""Episode metrics: hand-counted set arithmetic on small, readable examples."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from harness_app.harness.metrics import (
    EpisodeMetrics,
    episode_metrics,
    f_beta,
    metrics_from_state,
    recall_so_far,
    tool_diversity,
)
from harness_app.harness.types import QuerySpec

# Two-hop question: "bridge" supports, "answer" holds the answer.
QUERY = QuerySpec("q1", "Who directed the film?", "X", {"answer": 2, "bridge": 1})


def test_curated_and_trajectory_ratios_over_the_right_sets():
    m = episode_metrics(
        curated_ids={"answer", "noise1", "noise2", "noise3"},
        shown_ids={"answer", "bridge", "noise1", "noise2", "noise3", "noise4"},
        tool_counts={"search_corpus": 3},
        turns=4,
        format_errors=1,
        query=QUERY,
    )
    assert m.curated_recall == 0.5  # 1 of 2 relevant kept
    assert m.precision == 0.25  # 1 of 4 curated relevant
    assert m.final_answer_recall == 1.0  # the only answer doc is kept
    assert m.trajectory_recall == 1.0  # both relevant docs were shown
    assert m.trajectory_final_answer_recall == 1.0
    # F2 = 5·P·R / (4P + R) = 5·0.25·0.5 / (1 + 0.5) = 0.625 / 1.5
    assert m.f_beta == pytest.approx(0.625 / 1.5)
    assert (m.curated_count, m.shown_count, m.relevant_count, m.answer_count) == (4, 6, 2, 1)
    assert (m.turns, m.format_errors) == (4, 1)


def test_empty_curated_set_has_zero_precision_not_a_crash():
    m = episode_metrics(
        curated_ids=set(),
        shown_ids={"bridge"},
        tool_counts={},
        turns=1,
        format_errors=0,
        query=QUERY,
    )
    assert (m.precision, m.curated_recall, m.f_beta) == (0.0, 0.0, 0.0)
    assert m.trajectory_recall == 0.5
    assert m.trajectory_final_answer_recall == 0.0  # the answer doc was never shown


def test_seen_but_not_kept_answer_shows_as_trajectory_minus_curated_gap():
    m = episode_metrics(
        curated_ids={"bridge"},
        shown_ids={"bridge", "answer"},
        tool_counts={},
        turns=2,
        format_errors=0,
        query=QUERY,
    )
    assert m.final_answer_recall == 0.0
    assert m.trajectory_final_answer_recall == 1.0


@pytest.mark.parametrize(
    ("beta", "expected"),
    [
        (1.0, 2 * 0.5 * 1.0 / 1.5),  # harmonic mean of 0.5 and 1.0
        (2.0, 5 * 0.5 * 1.0 / (4 * 0.5 + 1.0)),  # 2.5 / 3
        (0.5, 1.25 * 0.5 * 1.0 / (0.25 * 0.5 + 1.0)),  # 0.625 / 1.125
    ],
)
def test_f_beta_weighs_recall_by_beta(beta, expected):
    assert f_beta(0.5, 1.0, beta) == pytest.approx(expected)


def test_f_beta_rejects_nonpositive_beta_and_handles_zero():
    assert f_beta(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="beta"):
        f_beta(0.5, 0.5, 0)


def test_beta_parameter_reaches_episode_metrics():
    m = episode_metrics(
        curated_ids={"answer", "n1", "n2", "n3"},
        shown_ids=set(),
        tool_counts={},
        turns=1,
        format_errors=0,
        query=QUERY,
        beta=1.0,
    )
    # P = 0.25, R = 0.5: F1 = 2·0.125/0.75 = 1/3
    assert m.f_beta == pytest.approx(1 / 3)
    assert m.beta == 1.0


def test_tool_diversity_ignores_end_search_and_unused_tools():
    counts = {"search_corpus": 4, "curate": 1, "verify": 0, "end_search": 1}
    assert tool_diversity(counts) == 2


def test_single_hop_qrels_without_answer_grade_use_relevant_docs_as_answers():
    scifact_like = QuerySpec("q", "claim", qrels={"d1": 1, "d2": 1})
    m = episode_metrics(
        curated_ids={"d1"},
        shown_ids={"d1"},
        tool_counts={},
        turns=1,
        format_errors=0,
        query=scifact_like,
    )
    assert m.final_answer_recall == 0.5
    assert m.answer_count == 2


def test_recall_so_far_tracks_curated_trajectory_and_answer():
    r = recall_so_far({"bridge"}, {"bridge", "answer", "noise"}, QUERY)
    assert (r.curated, r.trajectory, r.final_answer) == (0.5, 1.0, 0.0)
    assert r.to_json() == {"curated": 0.5, "trajectory": 1.0, "final_answer": 0.0}


def test_query_without_qrels_scores_zero_everywhere():
    m = episode_metrics(
        curated_ids={"a"},
        shown_ids={"a"},
        tool_counts={},
        turns=1,
        format_errors=0,
        query=QuerySpec("q", "text"),
    )
    assert (m.curated_recall, m.trajectory_recall, m.final_answer_recall) == (0.0, 0.0, 0.0)


@dataclass
class FakeState:
    shown_ids: set[str]
    tool_counts: dict[str, int]
    turns_used: int
    format_errors: int
    curated: set[str] = field(default_factory=set)

    def curated_ids(self) -> set[str]:
        return set(self.curated)


def test_metrics_from_state_reads_the_state_and_round_trips_json():
    state = FakeState({"answer", "bridge"}, {"search_corpus": 1, "curate": 1}, 3, 0, {"answer"})
    m = metrics_from_state(state, QUERY)
    assert (m.curated_recall, m.trajectory_recall, m.tool_diversity, m.turns) == (0.5, 1.0, 2, 3)
    assert EpisodeMetrics.from_json(m.to_json()) == m
