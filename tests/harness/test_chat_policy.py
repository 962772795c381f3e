"""The chat policy keeps an append-only conversation and turns replies into tool calls."""

from __future__ import annotations

import json

import httpx
import pytest

from harness_app.harness.llm.chat_policy import ChatPolicy, ChatPolicyConfig, PolicyStop
from harness_app.harness.llm.client import ChatClient, Sampling
from harness_app.harness.types import Observation, ToolResult
from tests.harness.test_llm_client import vllm_body

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_corpus",
            "description": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def scripted(replies):
    """A transport answering each request with the next scripted (status, body)."""
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        status, body = replies[len(requests) - 1]
        return (
            httpx.Response(status, json=body)
            if isinstance(body, dict)
            else httpx.Response(status, text=body)
        )

    return httpx.MockTransport(handler), requests


def tool_reply(name, args, call_id="c1"):
    return vllm_body(
        [1],
        [2],
        tool_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    )


def obs(turn, text, results=()):
    return Observation(turn=turn, text=text, tool_results=list(results), working_memory=f"WM{turn}")


def make_policy(replies, **config):
    config.setdefault("token_in", False)
    transport, requests = scripted(replies)
    client = ChatClient("http://vllm.test/v1", "m", transport=transport)
    policy = ChatPolicy(client, TOOLS, ChatPolicyConfig(retry_backoff_s=0, **config))
    policy.reset("who?")
    return policy, requests


def test_conversation_only_grows_and_tool_results_follow_the_call():
    policy, requests = make_policy(
        [
            (200, tool_reply("search_corpus", {"query": "a"})),
            (200, tool_reply("search_corpus", {"query": "b"}, "c2")),
        ]
    )
    calls = policy.act(obs(0, "QUESTION + WM0"), None)
    assert [(c.name, c.arguments, c.call_id) for c in calls] == [
        ("search_corpus", {"query": "a"}, "c1")
    ]
    policy.act(obs(1, "results", [ToolResult("c1", "search_corpus", "RESULT-1")]), None)
    first, second = (r["messages"] for r in requests)
    assert second[: len(first)] == first  # append-only: the old prompt is a prefix
    added = second[len(first) :]
    assert added[0]["role"] == "assistant" and added[0]["tool_calls"][0]["id"] == "c1"
    assert added[1] == {"role": "tool", "tool_call_id": "c1", "content": "RESULT-1"}
    assert added[2] == {"role": "user", "content": "WM1"}
    assert len(policy.calls) == 2 and policy.calls[1][0] == 1


def test_last_tool_policy_stops_on_a_plain_reply():
    policy, _ = make_policy(
        [(200, vllm_body([1], [2], content="I think it is Paris."))], termination_policy="last_tool"
    )
    with pytest.raises(PolicyStop) as info:
        policy.act(obs(0, "Q"), None)
    assert info.value.reason == "no_tool_call"


def test_max_turns_policy_feeds_a_plain_reply_back_as_a_format_error():
    policy, _ = make_policy(
        [(200, vllm_body([1], [2], content="no idea"))], termination_policy="max_turns"
    )
    [call] = policy.act(obs(0, "Q"), None)
    assert call.name == "" and call.arguments == "no idea"


def test_malformed_hermes_block_becomes_a_call_with_raw_arguments():
    content = '<tool_call>{"name": "search_corpus", "arguments": {"query": </tool_call>'
    policy, _ = make_policy([(200, vllm_body([1], [2], content=content))])
    [call] = policy.act(obs(0, "Q"), None)
    assert call.name == "" and call.arguments.startswith('{"name": "search_corpus"')


def test_json_schema_format_constrains_the_reply_and_parses_it():
    action = json.dumps({"tool": "search_corpus", "arguments": {"query": "x"}})
    policy, requests = make_policy(
        [(200, vllm_body([1], [2], content=action))], tool_call_format="json_schema"
    )
    [call] = policy.act(obs(0, "Q"), None)
    assert (call.name, call.arguments) == ("search_corpus", {"query": "x"})
    assert requests[0]["response_format"]["type"] == "json_schema"
    assert "tools" not in requests[0]
    assert "search_corpus" in requests[0]["messages"][0]["content"]


def test_server_errors_are_retried_then_end_the_episode_with_their_reason():
    policy, requests = make_policy([(503, "busy")] * 3, retries=2)
    with pytest.raises(PolicyStop) as info:
        policy.act(obs(0, "Q"), None)
    assert info.value.reason == "model_server_error"
    assert len(requests) == 3
    assert len(policy.calls) == 3 and all(r.error for _, r in policy.calls)


def test_context_overflow_is_not_retried():
    policy, requests = make_policy([(400, "maximum context length exceeded")])
    with pytest.raises(PolicyStop) as info:
        policy.act(obs(0, "Q"), None)
    assert info.value.reason == "context_overflow" and len(requests) == 1


def test_message_prefix_starts_the_conversation():
    transport, requests = scripted([(200, tool_reply("search_corpus", {"query": "a"}))])
    prefix = [
        {"role": "system", "content": "custom"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok"},
    ]
    policy = ChatPolicy(
        ChatClient("http://x/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(token_in=False),
        prefix_messages=prefix,
    )
    policy.reset("q")
    policy.act(obs(0, "Q"), None)
    assert requests[0]["messages"][:3] == prefix


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="unknown tool_call_format 'xml'"):
        ChatPolicyConfig(tool_call_format="xml")
    with pytest.raises(ValueError, match="unknown termination_policy"):
        ChatPolicyConfig(termination_policy="forever", sampling=Sampling())


# -- token-in mode ------------------------------------------------------------------------
END_OF_TURN, NEWLINE = 2, 10


def render(messages, add_generation_prompt):
    """A toy chat template: role marker, one token per character, end-of-turn, newline."""
    ids = []
    for m in messages:
        ids += [100 + len(m["role"])] + [ord(c) for c in m.get("content") or ""]
        ids += [END_OF_TURN, NEWLINE]
    return ids + ([101] if add_generation_prompt else [])


def token_server(completions):
    """/tokenize renders with the toy template; /completions samples scripted token ids whose
    text would re-tokenise differently (as real BPE sampling can)."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(
                200, json={"tokens": render(body["messages"], body["add_generation_prompt"])}
            )
        seen.append(body)
        text, ids, *finish = completions[len(seen) - 1]
        choice = {
            "text": text,
            "token_ids": ids,
            "finish_reason": finish[0] if finish else "stop",
            "logprobs": {"token_logprobs": [-0.25] * len(ids)},
        }
        return httpx.Response(
            200,
            json={
                "choices": [choice],
                "prompt_token_ids": body["prompt"],
                "usage": {"prompt_tokens": len(body["prompt"])},
            },
        )

    return httpx.MockTransport(handler), seen


def test_token_in_prompts_extend_the_sampled_tokens_exactly():
    from harness_app.harness.llm.reconstruct import CallTokens, reconstruct

    action = json.dumps({"tool": "search_corpus", "arguments": {"query": "x"}})
    # Sampled ids (7, 8, 9) are not what the template would produce for the text.
    transport, seen = token_server([(action, [7, 8, 9, END_OF_TURN])] * 3)
    policy = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(tool_call_format="json_schema", retry_backoff_s=0),
    )
    policy.reset("q")
    for turn in range(3):
        [call] = policy.act(obs(turn, f"observation {turn}"), None)
        assert call.name == "search_corpus"
    first, second = seen[0]["prompt"], seen[1]["prompt"]
    assert second[: len(first) + 4] == first + [7, 8, 9, END_OF_TURN]
    assert "response_format" in seen[0] and seen[0]["logprobs"] == 0
    calls = [
        CallTokens(i, r.prompt_token_ids, r.completion_token_ids, r.completion_logprobs)
        for i, (_, r) in enumerate(policy.calls)
    ]
    chains, breaks = reconstruct(calls)
    assert len(chains) == 1 and [b.reason for b in breaks] == ["first_call"]
    assert chains[0].loss_mask.count(1) == 12  # exactly the 3 x 4 sampled tokens


def test_a_reply_cut_off_by_max_tokens_gets_the_template_end_of_turn_masked():
    action = json.dumps({"tool": "search_corpus", "arguments": {"query": "x"}})
    transport, seen = token_server([(action[:5], [7, 8], "length"), (action, [7, 8, END_OF_TURN])])
    policy = ChatPolicy(
        ChatClient("http://vllm.test/v1", "m", transport=transport),
        TOOLS,
        ChatPolicyConfig(tool_call_format="json_schema", retry_backoff_s=0),
    )
    policy.reset("q")
    policy.act(obs(0, "first"), None)
    policy.act(obs(1, "second"), None)
    first, second = seen[0]["prompt"], seen[1]["prompt"]
    assert second[: len(first) + 4] == first + [7, 8, END_OF_TURN, NEWLINE]
