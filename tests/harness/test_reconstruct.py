"""Prefix merging keeps sampled tokens trainable and masks everything between them."""

from harness_app.harness.llm.reconstruct import CallTokens, reconstruct


def _call(cid, prompt, completion, version="v0"):
    return CallTokens(
        cid, prompt, completion, [-0.1 * (i + 1) for i in range(len(completion))], version
    )


def test_a_call_extending_the_chain_joins_it_with_the_interstitial_masked():
    first = _call(1, [1, 2, 3], [10, 11])
    # Second prompt = first prompt + first completion + tool result tokens [20, 21].
    second = _call(2, [1, 2, 3, 10, 11, 20, 21], [12])
    chains, breaks = reconstruct([first, second])
    assert len(chains) == 1
    chain = chains[0]
    assert chain.token_ids == [1, 2, 3, 10, 11, 20, 21, 12]
    assert chain.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert chain.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.1]
    assert chain.call_ids == [1, 2]
    assert breaks[0].reason == "first_call"


def test_a_rewritten_history_breaks_the_chain_with_the_position():
    first = _call(1, [1, 2, 3], [10, 11])
    rewritten = _call(2, [1, 2, 9, 10, 11, 20], [12])
    chains, breaks = reconstruct([first, rewritten])
    assert len(chains) == 2
    assert breaks[1].reason == "history_rewritten: prefix mismatch at token 2 of 5"
    assert chains[1].loss_mask == [0, 0, 0, 0, 0, 0, 1]


def test_interleaved_subagent_calls_form_separate_chains():
    main1 = _call("m1", [1, 2], [3])
    sub1 = _call("s1", [7, 8], [9])
    main2 = _call("m2", [1, 2, 3, 4], [5])
    sub2 = _call("s2", [7, 8, 9, 6], [6])
    chains, breaks = reconstruct([main1, sub1, main2, sub2])
    assert [c.call_ids for c in chains] == [["m1", "m2"], ["s1", "s2"]]
    assert len(breaks) == 2


def test_per_request_mode_trains_only_each_completion():
    calls = [_call(1, [1, 2], [3, 4]), _call(2, [1, 2, 3, 4, 5], [6])]
    segments, breaks = reconstruct(calls, strategy="per_request")
    assert breaks == []
    assert [s.loss_mask for s in segments] == [[0, 0, 1, 1], [0, 0, 0, 0, 0, 1]]
    assert segments[1].sampled_tokens == 1
