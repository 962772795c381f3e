"""The rerender context mode: every prompt rebuilt from the harness state, in real tokens.

The toy template (tests/harness/test_chat_policy.py) makes one token per character, so a
prompt's length in tokens is known exactly and the budget marker can be checked against it.
"""

from __future__ import annotations

import json
import re

import pytest

from harness_app.harness.llm.chat_policy import ChatPolicy, ChatPolicyConfig, PolicyStop
from harness_app.harness.llm.client import ChatClient
from harness_app.harness.llm.context import PASSES
from harness_app.harness.llm.reconstruct import (
    CallTokens,
    reconstruct,
)
from harness_app.harness.types import Observation, ToolResult
from tests.harness.test_chat_policy import END_OF_TURN, TOOLS, render, token_server

MARKER = re.compile(r"\[Context: (\d+)/(\d+)\]")


def reply(turn: int, reasoning: str = "") -> tuple[str, list[int]]:
    call = json.dumps({"name": "search_corpus", "arguments": {"query": f"query {turn}"}})
    text = f"{reasoning}<tool_call>{call}</tool_call>"
    return text, [7, 8, 9, END_OF_TURN]


def observation(turn: int, result: str = "") -> Observation:
    results = [ToolResult("call_0", "search_corpus", result or f"hits of turn {turn}")]
    return Observation(
        turn=turn,
        text=f"<WM of turn {turn}>",
        tool_results=results if turn else [],
        working_memory=f"<WM of turn {turn}>",
    )


def play(turns: int, completions, **config):
    transport, seen = token_server(completions)
    policy = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(retry_backoff_s=0, context_mode="rerender", **config),
    )
    policy.reset("Who built the lamp?")
    for turn in range(turns):
        policy.act(observation(turn), None)
    return policy, seen


def prompt_of(policy, call_index):
    return policy.calls[call_index][1].prompt_messages


def test_a_later_prompt_holds_the_snapshot_of_turn_n_minus_5_and_the_last_5_turns():
    long = "I think " * 60  # 480 characters of reasoning
    policy, seen = play(8, [reply(t, long) for t in range(8)])
    messages = prompt_of(policy, 7)  # acting on observation 7
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 5
    opening = messages[1]["content"]
    assert opening.startswith("QUESTION: Who built the lamp?")
    assert "WORKINGMEMORY as of turn 2:\n<WM of turn 2>" in opening
    text = json.dumps(messages)
    assert "<WM of turn 7>" not in text and "<WM of turn 1>" not in text
    assert "hits of turn 2" not in text and "hits of turn 3" in text
    assistants = [m["content"] for m in messages if m["role"] == "assistant"]
    # The reply to the snapshot's turn opens the kept turns; its results came at turn 3.
    assert '"query 2"' in assistants[0] and '"query 6"' in assistants[-1]
    # Older reasoning is cut to 300 characters; the calls and the latest reply stay whole.
    assert all(a.index("<tool_call>") == 302 for a in assistants[:-1])
    assert assistants[-1] == reply(6, long)[0]
    # The prompt went out as the token ids of exactly these messages.
    assert seen[7]["prompt"] == render(messages, True)


def test_the_marker_states_the_prompt_length_in_real_tokens():
    policy, seen = play(4, [reply(t) for t in range(4)], context_limit=4000)
    for index in (1, 2, 3):
        tool = prompt_of(policy, index)[-1]
        used, limit = map(int, MARKER.search(tool["content"]).groups())
        assert (used, limit) == (len(seen[index]["prompt"]), 4000)
    # An older turn keeps the marker it was shown with.
    older = next(m for m in prompt_of(policy, 3) if m["role"] == "tool")
    assert MARKER.search(older["content"]).group(1) == str(len(seen[1]["prompt"]))


@pytest.mark.parametrize(
    ("fraction", "flag"),
    [
        (0.5, None),
        (0.62, "of the context used: prefer curating"),
        (0.76, "of the context used: stop exploring"),
        (0.95, "call end_search now"),
    ],
)
def test_the_marker_is_flagged_as_the_context_fills(fraction, flag):
    unflagged, _ = play(2, [reply(t) for t in range(2)], context_limit=100_000)
    size = len(unflagged.calls[1][1].prompt_token_ids)
    limit = int(size / fraction)
    policy, seen = play(2, [reply(t) for t in range(2)], context_limit=limit)
    tool = prompt_of(policy, 1)[-1]["content"]
    used = len(seen[1]["prompt"])
    assert MARKER.search(tool) and used <= limit
    if flag is None:
        assert tool.endswith(f"[Context: {used}/{limit}]")
    else:
        assert flag in tool


def test_over_the_cap_the_truncation_passes_run_in_order_and_every_prompt_fits():
    big = "evidence " * 150  # a 1,350-character result each turn
    transport, seen = token_server([reply(t, "why " * 40) for t in range(9)])
    policy = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(retry_backoff_s=0, context_mode="rerender", context_limit=2500),
    )
    policy.reset("q")
    for turn in range(9):
        policy.act(observation(turn, big), None)
    assert all(len(body["prompt"]) <= 2500 for body in seen)
    applied = [p for _, passes in policy.truncations for p in passes]
    assert applied and applied[0] == "older_results"
    assert "drop_oldest" in applied
    for _, passes in policy.truncations:
        assert passes == sorted(passes, key=PASSES.index)
    # Dropping a turn moves the snapshot forward, so the dropped turn is still summarised.
    last = prompt_of(policy, 8)
    kept = sum(m["role"] == "assistant" for m in last)
    assert f"as of turn {8 - kept}:" in last[1]["content"]


def test_a_prompt_that_cannot_fit_ends_the_episode_with_context_budget():
    transport, seen = token_server([reply(0)])
    policy = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(retry_backoff_s=0, context_mode="rerender", context_limit=50),
    )
    policy.reset("q")
    with pytest.raises(PolicyStop) as stop:
        policy.act(observation(0), None)
    assert stop.value.reason == "context_budget" and "after every truncation pass" in str(
        stop.value
    )
    assert seen == []  # nothing was sent


def test_each_call_is_its_own_training_sequence_with_loss_on_its_completion_only():
    policy, _ = play(4, [reply(t) for t in range(4)])
    records = [r for _, r in policy.calls]
    assert all(r.rerendered for r in records)
    calls = [
        CallTokens(
            i,
            r.prompt_token_ids,
            r.completion_token_ids,
            r.completion_logprobs,
            rerendered=r.rerendered,
        )
        for i, r in enumerate(records)
    ]
    chains, breaks = reconstruct(calls)
    assert [b.reason for b in breaks] == ["first_call", "rerender", "rerender", "rerender"]
    assert len(chains) == 4
    for chain, record in zip(chains, records, strict=True):
        assert chain.loss_mask == [0] * len(record.prompt_token_ids) + [1] * 4


def test_append_mode_refuses_a_token_in_prompt_over_its_limit():
    transport, seen = token_server([reply(0)])
    policy = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(retry_backoff_s=0, context_limit=20),
    )
    policy.reset("q")
    with pytest.raises(PolicyStop) as stop:
        policy.act(observation(0), None)
    assert stop.value.reason == "context_budget" and seen == []


def test_append_mode_records_the_messages_its_token_in_prompt_was_rendered_from():
    policy, _ = play(1, [reply(0)])
    append = ChatPolicy(policy.client, TOOLS, ChatPolicyConfig(retry_backoff_s=0))
    assert append.config.limit == 32_768 and policy.config.limit == 30_720
    transport, seen = token_server([reply(0)])
    append = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(retry_backoff_s=0),
    )
    append.reset("q")
    append.act(observation(0), None)
    [(_, record)] = append.calls
    assert not record.rerendered
    assert record.prompt_messages[-1] == {"role": "user", "content": "<WM of turn 0>"}
    assert seen[0]["prompt"] == render(record.prompt_messages, True)


def test_bad_context_settings_name_the_field():
    with pytest.raises(ValueError, match="unknown context_mode 'rolling'"):
        ChatPolicyConfig(context_mode="rolling")
    with pytest.raises(ValueError, match="context_limit must be a positive token count"):
        ChatPolicyConfig(context_limit=0)


def test_the_env_token_counter_is_the_servers_tokenizer_with_the_estimate_as_fallback():
    import httpx

    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"count": 3, "tokens": [5, 6, 7]})

    client = ChatClient("http://vllm.test/v1", "m", transport=httpx.MockTransport(handler))
    counter = ChatPolicy(client, TOOLS, ChatPolicyConfig()).token_counter()
    assert counter is not None and counter("hello there") == 3
    assert bodies == [{"model": "m", "prompt": "hello there", "add_special_tokens": False}]

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client = ChatClient("http://vllm.test/v1", "m", transport=httpx.MockTransport(down))
    counter = ChatPolicy(client, TOOLS, ChatPolicyConfig()).token_counter()
    assert counter is not None and counter("x" * 10) == 3  # ceil(10 / 4)
    chat = ChatPolicy(client, TOOLS, ChatPolicyConfig(token_in=False))
    assert chat.token_counter() is None  # plain chat completions: maybe no /tokenize
