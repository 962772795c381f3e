"""Each model family's tool-call syntax is read into the calls the harness runs, and what
cannot be read is counted as a format error, as the hermes path always has been."""

from __future__ import annotations

import pytest

from harness_app.harness.llm.chat_policy import ChatPolicy, ChatPolicyConfig
from harness_app.harness.llm.client import ChatClient
from harness_app.harness.llm.tool_parsers import TOOL_PARSERS, parse_tool_calls
from tests.harness import tool_call_fixtures as fx
from tests.harness.fakes import make_env
from tests.harness.test_chat_policy import END_OF_TURN, TOOLS, obs, token_server

READABLE = ("one_call", "two_calls", "reasoning_then_call", "no_call")


@pytest.mark.parametrize("case", READABLE)
@pytest.mark.parametrize("family", fx.FAMILIES)
def test_each_family_reads_its_own_calls(family, case):
    calls = parse_tool_calls(family, fx.FAMILIES[family][case])
    assert [c.name for c in calls] == ["search_corpus"] * len(fx.EXPECTED[case])
    assert [c.arguments for c in calls] == fx.EXPECTED[case]
    assert [c.call_id for c in calls] == [f"call_{i}" for i in range(len(calls))]


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_parsed_calls_run_in_the_harness_without_format_errors(family):
    env = make_env()
    env.step(parse_tool_calls(family, fx.FAMILIES[family]["two_calls"]))
    assert env.state.format_errors == 0 and env.state.tool_counts == {"search_corpus": 2}


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_malformed_json_is_one_format_error(family):
    [call] = parse_tool_calls(family, fx.FAMILIES[family]["malformed_json"])
    assert isinstance(call.arguments, str) and "Eiffel Tower" in call.arguments
    env = make_env()
    [result] = env.step([call]).tool_results
    assert not result.ok and env.state.format_errors == 1


def test_harmony_keeps_the_function_name_so_the_error_names_the_bad_arguments():
    [call] = parse_tool_calls("harmony", fx.HARMONY["malformed_json"])
    [result] = make_env().step([call]).tool_results
    assert call.name == "search_corpus" and "not valid JSON" in result.error


def test_harmony_reads_a_call_without_its_stop_token_and_a_recipient_in_the_role_header():
    # vLLM may leave the <|call|> stop token out of the text; the recipient may also be
    # written after the role instead of after the channel.
    cut = fx.HARMONY["one_call"].removesuffix("<|call|>")
    in_role = (
        "<|start|>assistant to=functions.search_corpus<|channel|>commentary json<|message|>"
        '{"query": "Eiffel Tower height"}'
    )
    for text in (cut, in_role):
        [call] = parse_tool_calls("harmony", text)
        assert (call.name, call.arguments) == ("search_corpus", fx.HEIGHT)


def test_harmony_call_to_a_builtin_tool_is_an_unknown_tool():
    text = '<|channel|>analysis to=browser.search<|message|>{"query": "x"}<|call|>'
    [call] = parse_tool_calls("harmony", text)
    [result] = make_env().step([call]).tool_results
    assert call.name == "browser.search" and "unknown tool" in result.error


def test_mistral_per_call_forms_of_newer_tokenizers():
    two = parse_tool_calls("mistral", fx.MISTRAL_ARGS_TWO_CALLS)
    assert [c.arguments for c in two] == [fx.HEIGHT, fx.POPULATION]
    [one] = parse_tool_calls("mistral", fx.MISTRAL_CALL_ID_ONE_CALL)
    assert (one.name, one.arguments) == ("search_corpus", fx.HEIGHT)


def test_an_unknown_shape_is_a_format_error():
    for family, text in [
        ("llama3_json", '{"name": "search_corpus", "parameters": {"query": "x"}}; [1, 2]'),
        ("mistral", '[TOOL_CALLS]{"tool": "search_corpus"}'),
        ("mistral", '[TOOL_CALLS][{"function": "search_corpus"}]'),
    ]:
        calls = parse_tool_calls(family, text)
        assert calls[-1].name == "" and isinstance(calls[-1].arguments, str), (family, text)


def test_other_families_syntax_is_no_call_under_hermes():
    # What a gpt-oss policy got before the switch: no call, so every turn a format error.
    assert parse_tool_calls("hermes", fx.HARMONY["one_call"]) == []
    assert parse_tool_calls("harmony", fx.HERMES["one_call"]) == []


# -- the policy with each parser ---------------------------------------------------------
def _token_in_policy(parser: str | None, completions):
    transport, seen = token_server(completions)
    client = ChatClient("http://vllm.test/v1", "m", transport=transport)
    chosen = {"tool_parser": parser} if parser else {}
    policy = ChatPolicy(client, TOOLS, ChatPolicyConfig(retry_backoff_s=0, **chosen))
    policy.reset("q")
    return policy, seen


def test_the_default_parser_is_hermes():
    assert ChatPolicyConfig().tool_parser == "hermes"
    policy, seen = _token_in_policy(None, [(fx.HERMES["one_call"], [7, END_OF_TURN])])
    [call] = policy.act(obs(0, "Q"), None)
    assert call.arguments == fx.HEIGHT
    assert "skip_special_tokens" not in seen[0]  # the hermes request is as it was


def test_an_unknown_parser_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown tool_parser 'qwen'; use one of hermes"):
        ChatPolicyConfig(tool_parser="qwen")


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_token_in_policy_acts_on_each_familys_completion(family):
    text = fx.FAMILIES[family]["two_calls"]
    policy, seen = _token_in_policy(family, [(text, [7, 8, END_OF_TURN])] * 2)
    calls = policy.act(obs(0, "Q"), None)
    assert [c.arguments for c in calls] == [fx.HEIGHT, fx.POPULATION]
    # Their results come back as tool messages in the next prompt, after the sampled tokens.
    policy.act(obs(1, "R", []), None)
    assert [m["role"] for m in policy.messages[-5:-1]] == ["assistant", "tool", "tool", "user"]
    assert seen[1]["prompt"][: len(seen[0]["prompt"]) + 3] == seen[0]["prompt"] + [7, 8, 2]
    assert seen[0].get("skip_special_tokens", True) is (family == "hermes")


@pytest.mark.parametrize(
    ("family", "text", "ids"),
    [
        ("harmony", fx.HARMONY["reasoning_then_call"], fx.HARMONY_REASONING_THEN_CALL_IDS),
        ("mistral", fx.MISTRAL["one_call"], fx.MISTRAL_ONE_CALL_IDS),
    ],
)
def test_real_tokenized_completions_are_parsed_and_kept_token_for_token(family, text, ids):
    policy, _ = _token_in_policy(family, [(text, ids)])
    [call] = policy.act(obs(0, "Q"), None)
    assert (call.name, call.arguments) == ("search_corpus", fx.HEIGHT)
    [(_, record)] = policy.calls
    assert record.completion_token_ids == ids


def test_harmony_calls_are_recorded_on_the_assistant_message():
    # gpt-oss's chat template raises on a tool result with no assistant tool call before it.
    policy, _ = _token_in_policy("harmony", [(fx.HARMONY["one_call"], [7, END_OF_TURN])])
    policy.act(obs(0, "Q"), None)
    [recorded] = policy.messages[-1]["tool_calls"]
    assert recorded["id"] == "call_0" and recorded["function"]["name"] == "search_corpus"


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_a_reply_without_a_call_is_fed_back_as_a_format_error(family):
    policy, _ = _token_in_policy(family, [(fx.FAMILIES[family]["no_call"], [7, END_OF_TURN])])
    [call] = policy.act(obs(0, "Q"), None)
    assert call.name == "" and "330 m" in call.arguments


def test_server_side_tool_calls_still_win_over_the_text():
    from tests.harness.test_chat_policy import make_policy, tool_reply

    reply = tool_reply("search_corpus", {"query": "server"})
    reply["choices"][0]["message"]["content"] = fx.HARMONY["one_call"]
    policy, _ = make_policy([(200, reply)], tool_parser="harmony")
    [call] = policy.act(obs(0, "Q"), None)
    assert call.arguments == {"query": "server"} and call.call_id == "c1"


def test_every_parser_is_tested():
    assert set(TOOL_PARSERS) == set(fx.FAMILIES)
