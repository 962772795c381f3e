"""Token-faithful sequences: masks, logprobs, advantages and exclusions by hand."""

from __future__ import annotations

import pytest

from harness_app.harness.llm.reconstruct import CallTokens
from training.rl.batches import EpisodeCalls, batch_build, build_sequences


def _call(cid, prompt, completion, logprobs, version="v1"):
    return CallTokens(cid, prompt, completion, logprobs, version)


def _episode(episode_id, group_id, reward, calls, reason="end_search"):
    return EpisodeCalls(episode_id, group_id, reward, reason, calls)


# Two turns: the second prompt is the first prompt + its completion + a tool result (20, 21).
TWO_TURNS = [
    _call(1, [1, 2, 3], [10, 11], [-0.5, -0.25]),
    _call(2, [1, 2, 3, 10, 11, 20, 21], [12, 2], [-1.0, -0.125]),
]


def test_merged_turns_mask_the_tool_result_and_keep_the_sampled_logprobs():
    build = build_sequences([_episode(7, 1, 0.9, TWO_TURNS)], {7: 0.4})
    [seq] = build.sequences
    assert seq.prompt_ids == [1, 2, 3]
    assert seq.response_ids == [10, 11, 20, 21, 12, 2]
    assert seq.loss_mask == [1, 1, 0, 0, 1, 1]
    assert seq.rollout_logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0, -0.125]
    assert seq.sampled_logprobs() == [-0.5, -0.25, -1.0, -0.125]
    assert (seq.reward, seq.advantage, seq.policy_version) == (0.9, 0.4, "v1")
    assert (seq.sample_id, seq.segment_idx, seq.termination_reason) == ("7-0", 0, "end_search")
    assert build.breaks == []


def test_a_rewritten_history_gives_two_segments_with_the_same_advantage():
    calls = [TWO_TURNS[0], _call(2, [1, 2, 9, 10, 11, 20], [12], [-1.0])]
    build = build_sequences([_episode(7, 1, 0.9, calls)], {7: -0.2})
    assert [s.segment_idx for s in build.sequences] == [0, 1]
    assert [s.advantage for s in build.sequences] == [-0.2, -0.2]
    assert build.sequences[1].prompt_ids == [1, 2, 9, 10, 11, 20]
    assert build.sequences[1].loss_mask == [1]
    assert [b.reason for b in build.breaks] == [
        "history_rewritten: prefix mismatch at token 2 of 5"
    ]


def test_request_mode_makes_one_sequence_per_call_with_the_prompt_outside_the_mask():
    build = build_sequences([_episode(7, 1, 0.9, TWO_TURNS)], {7: 0.4}, mode="request")
    assert [s.response_ids for s in build.sequences] == [[10, 11], [12, 2]]
    assert build.sequences[1].prompt_ids == [1, 2, 3, 10, 11, 20, 21]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="reconstruction: unknown reconstruction strategy 'chat'"):
        build_sequences([_episode(7, 1, 0.9, TWO_TURNS)], {7: 0.4}, mode="chat")


def test_calls_from_two_policy_versions_exclude_the_episode_with_the_versions():
    calls = [TWO_TURNS[0], _call(2, TWO_TURNS[1].prompt_ids, [12], [-1.0], version="v2")]
    build = build_sequences([_episode(7, 1, 0.9, calls)], {7: 0.4})
    assert build.sequences == []
    [exclusion] = build.exclusions
    assert exclusion.episode_id == 7
    assert exclusion.reason == "mixed_policy_versions: calls from 'v1', 'v2'"


def test_batch_build_computes_means_over_trainable_episodes_only():
    mixed = [TWO_TURNS[0], _call(2, TWO_TURNS[1].prompt_ids, [12], [-1.0], version="v2")]
    episodes = [
        _episode(1, 100, 1.0, TWO_TURNS),
        _episode(2, 100, 0.0, TWO_TURNS),
        _episode(3, 100, 0.0, mixed),  # excluded first, so the mean is (1 + 0) / 2
        _episode(4, 200, 0.5, TWO_TURNS),
        _episode(5, 200, 0.5, TWO_TURNS),  # zero variance: group 200 dropped
        _episode(6, 300, 0.7, []),  # no calls at all
    ]
    build = batch_build(episodes)
    assert {s.episode_id: s.advantage for s in build.sequences} == {1: 0.5, 2: -0.5}
    assert build.kept_groups == [100]
    assert build.dropped_groups == [200]
    reasons = {e.episode_id: e.reason for e in build.exclusions}
    assert reasons[3].startswith("mixed_policy_versions")
    assert (
        reasons[4]
        == reasons[5]
        == "zero_variance_group: the 2 reward(s) of group 200 are all equal"
    )
    assert reasons[6] == "no_sampled_tokens: no successful model call"
    assert build.exclusion_counts() == {
        "mixed_policy_versions": 1,
        "zero_variance_group": 2,
        "no_sampled_tokens": 1,
    }
    assert build.episodes == 2
