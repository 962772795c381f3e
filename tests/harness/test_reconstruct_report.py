"""The strategy report: Polar's Fig. 5b figures on constructed calls (no database)."""

from __future__ import annotations

import pytest

from harness_app.harness.llm.reconstruct import (
    PER_REQUEST,
    PREFIX_MERGE,
    CallTokens,
    reconstruct,
    strategy_clean,
)
from harness_app.harness.llm.reconstruct_report import (
    TrainerShape,
    report_table,
    strategy_report,
)

SYSTEM = [1, 2, 3]


def _call(
    call_id: int, prompt: list[int], completion: list[int], agent: str = "main"
) -> CallTokens:
    return CallTokens(call_id, prompt, completion, [-0.5] * len(completion), "v0", agent)


def _growing_chain() -> list[CallTokens]:
    # Each prompt is the one before, its completion, then a tool result.
    return [
        _call(1, SYSTEM, [10, 11]),  # 3 + 2 = 5 tokens
        _call(2, [*SYSTEM, 10, 11, 20], [12]),  # 6 + 1 = 7
        _call(3, [*SYSTEM, 10, 11, 20, 12, 21, 22], [13, 14]),  # 9 + 2 = 11
    ]


def test_a_growing_chain_is_one_sequence_merged_and_three_per_request() -> None:
    report = strategy_report([_growing_chain()])
    merged, per_call = report.figures[PREFIX_MERGE], report.figures[PER_REQUEST]
    assert (merged.sequences, per_call.sequences) == (1, 3)
    # Merged: the last call's prompt and completion, once. Per request: 5 + 7 + 11.
    assert (merged.tokens_processed, per_call.tokens_processed) == (11, 23)
    assert merged.trained_tokens == per_call.trained_tokens == 5
    assert (merged.forward_passes, per_call.forward_passes) == (1, 3)
    assert report.ratio("sequences") == 3.0
    assert report.ratio("tokens_processed") == pytest.approx(23 / 11)
    assert report.ratio("trained_tokens") == 1.0
    assert merged.breaks == {"first_call": 1}
    assert not per_call.breaks


def test_optimizer_steps_follow_the_trainer_substeps_or_a_fixed_minibatch() -> None:
    calls = [_growing_chain()]
    # The built-in trainer: min(substeps, kept sequences) steps per batch.
    four = strategy_report(calls, TrainerShape(substeps=4))
    assert four.figures[PREFIX_MERGE].optimizer_steps == 1
    assert four.figures[PER_REQUEST].optimizer_steps == 3
    # A trainer with fixed two-sequence minibatches: ceil(kept / 2).
    fixed = strategy_report(calls, TrainerShape(sequences_per_update=2))
    assert fixed.figures[PREFIX_MERGE].optimizer_steps == 1
    assert fixed.figures[PER_REQUEST].optimizer_steps == 2


def test_the_length_cap_drops_sequences_before_they_count_as_passes() -> None:
    report = strategy_report([_growing_chain()], TrainerShape(max_sequence_tokens=7))
    merged, per_call = report.figures[PREFIX_MERGE], report.figures[PER_REQUEST]
    assert (merged.over_cap_sequences, merged.forward_passes, merged.optimizer_steps) == (1, 0, 0)
    assert (per_call.over_cap_sequences, per_call.forward_passes) == (1, 2)


def test_a_compaction_and_a_subagent_give_separate_chains_with_their_reasons() -> None:
    calls = [
        *_growing_chain(),
        _call(4, [7, 7, 40], [41], agent="sub"),  # a subagent with its own system prompt
        _call(5, [7, 7, 40, 41, 42], [43], agent="sub"),
        _call(6, [*SYSTEM, 90], [91]),  # the main agent summarised its history
    ]
    segments, breaks = reconstruct(calls, strategy="prefix_merge")
    assert [s.call_ids for s in segments] == [[1, 2, 3], [6], [4, 5]]
    assert [b.reason.split(":")[0] for b in breaks] == [
        "first_call",
        "context_compaction",
        "subagent_start",
    ]
    report = strategy_report({"session": calls})
    merged, per_call = report.figures[PREFIX_MERGE], report.figures[PER_REQUEST]
    assert merged.breaks == {"first_call": 1, "context_compaction": 1, "subagent_start": 1}
    assert (merged.sequences, per_call.sequences) == (3, 6)
    assert merged.tokens_processed == 11 + 5 + 6
    assert per_call.tokens_processed == 23 + 4 + 6 + 5


def test_sessions_are_reconstructed_apart_and_summed() -> None:
    report = strategy_report([_growing_chain(), _growing_chain()])
    assert (report.sessions, report.calls) == (2, 6)
    assert report.figures[PREFIX_MERGE].sequences == 2
    assert report.figures[PER_REQUEST].tokens_processed == 46


def test_no_calls_give_zero_figures_and_no_ratio() -> None:
    report = strategy_report([])
    assert report.figures[PREFIX_MERGE].sequences == 0
    assert report.ratio("sequences") is None
    assert report.to_json()["ratios"]["tokens_processed"] is None


def test_the_table_shows_each_figure_and_the_breaks() -> None:
    table = report_table(strategy_report([_growing_chain()]))
    assert "1 session(s), 3 call(s)" in table
    assert "tokens processed" in table and "2.09x" in table
    assert "chain breaks (prefix_merge): first_call 1" in table


def test_strategy_names_and_aliases() -> None:
    assert strategy_clean("prefix") == PREFIX_MERGE
    assert strategy_clean("request") == PER_REQUEST
    assert strategy_clean("per_request") == PER_REQUEST
    with pytest.raises(ValueError, match="reconstruction: unknown reconstruction strategy 'x'"):
        strategy_clean("x")
    with pytest.raises(ValueError, match=r"^mode: "):
        strategy_clean("merged", field="mode")


def test_the_sessions_are_one_batch_for_the_optimizer_step_count() -> None:
    # Two sessions of three calls: 2 merged sequences, 6 per request, in one batch.
    report = strategy_report([_growing_chain(), _growing_chain()], TrainerShape(substeps=4))
    assert report.figures[PREFIX_MERGE].optimizer_steps == 2
    assert report.figures[PER_REQUEST].optimizer_steps == 4
    fixed = strategy_report([_growing_chain()] * 2, TrainerShape(sequences_per_update=4))
    assert (
        fixed.figures[PREFIX_MERGE].optimizer_steps,
        fixed.figures[PER_REQUEST].optimizer_steps,
    ) == (1, 2)


def test_trainer_settings_out_of_the_trainers_range_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="substeps must be >= 1, got 0"):
        TrainerShape(substeps=0)
    with pytest.raises(ValueError, match="max_sequence_tokens must be >= 2 or None, got 1"):
        TrainerShape(max_sequence_tokens=1)
    with pytest.raises(ValueError, match="sequences_per_update must be >= 1 or None, got 0"):
        TrainerShape(sequences_per_update=0)
