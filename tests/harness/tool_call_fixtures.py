"""Completions in each model family's tool-call syntax, written for this project's tests.

Every family has the same five cases, all calling `search_corpus`: one call, two calls,
reasoning before the call, malformed JSON, and no call at all. Texts are what vLLM returns
with `skip_special_tokens: false`; the end-of-turn marker is kept where the tokenizer
renders it, since a server may or may not include it.

Provenance (see docs/harness.md, "Tool-call parsers"):
- harmony: rendered and tokenized offline with openai_harmony (oss-harmony 0.0.11,
  HarmonyEncodingName.HARMONY_GPT_OSS): `encoding.render(message)` per message, the leading
  `<|start|>assistant` dropped because the prompt ends with it. The ids are that encoding's.
- mistral one_call, two_calls, malformed_json, no_call: tokenized offline with mistral_common
  1.13.1 and its bundled tekken_240911.json (tokenizer v3), decoded keeping special tokens.
  The `[ARGS]` forms (tokenizers v11 and v13) are hand-written from mistral_common's encoder
  source: no tokenizer file with those special tokens ships offline.
- hermes and llama3_json: hand-written from the Qwen and Llama 3.1 documentation; no Qwen or
  Llama tokenizer is available offline.
"""

from __future__ import annotations

HEIGHT = {"query": "Eiffel Tower height"}
POPULATION = {"query": "Paris population"}
CASES = ("one_call", "two_calls", "reasoning_then_call", "malformed_json", "no_call")
EXPECTED = {
    "one_call": [HEIGHT],
    "two_calls": [HEIGHT, POPULATION],
    "reasoning_then_call": [HEIGHT],
    "no_call": [],
}

_H = '{"name": "search_corpus", "arguments": {"query": "Eiffel Tower height"}}'
_P = '{"name": "search_corpus", "arguments": {"query": "Paris population"}}'
HERMES = {
    "one_call": f"<tool_call>\n{_H}\n</tool_call>",
    "two_calls": f"<tool_call>\n{_H}\n</tool_call>\n<tool_call>\n{_P}\n</tool_call>",
    "reasoning_then_call": (
        "<think>\nThe question asks about the tower; search for it first.\n</think>\n\n"
        f"<tool_call>\n{_H}\n</tool_call>"
    ),
    "malformed_json": (
        '<tool_call>\n{"name": "search_corpus", "arguments": {"query": "Eiffel Tower\n</tool_call>'
    ),
    "no_call": "The tower is 330 m tall.",
}

_CALL = "<|channel|>commentary to=functions.search_corpus <|constrain|>json<|message|>"
HARMONY = {
    "one_call": f'{_CALL}{{"query": "Eiffel Tower height"}}<|call|>',
    "two_calls": (
        f'{_CALL}{{"query": "Eiffel Tower height"}}<|call|>'
        f'<|start|>assistant{_CALL}{{"query": "Paris population"}}<|call|>'
    ),
    "reasoning_then_call": (
        "<|channel|>analysis<|message|>The question asks about the tower; search for it "
        f'first.<|end|><|start|>assistant{_CALL}{{"query": "Eiffel Tower height"}}<|call|>'
    ),
    "malformed_json": f'{_CALL}{{"query": "Eiffel Tower<|call|>',
    "no_call": (
        "<|channel|>analysis<|message|>I already know this.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>The tower is 330 m tall.<|end|>"
    ),
}
# HARMONY["reasoning_then_call"] as the o200k_harmony encoding tokenizes it.
HARMONY_REASONING_THEN_CALL_IDS = [
    200005, 35644, 200008, 976, 4928, 31064, 1078, 290, 35225, 26, 3684, 395, 480, 1577, 13,
    200007, 200006, 173781, 200005, 12606, 815, 316, 28, 44580, 16718, 1303, 104970, 220,
    200003, 4108, 200008, 10848, 2975, 1243, 392, 36, 129338, 37994, 4679, 18583, 200012,
]  # fmt: skip

_LH = '{"name": "search_corpus", "parameters": {"query": "Eiffel Tower height"}}'
_LP = '{"name": "search_corpus", "parameters": {"query": "Paris population"}}'
LLAMA3_JSON = {
    "one_call": f"{_LH}<|eot_id|>",
    "two_calls": f"{_LH}; {_LP}",
    "reasoning_then_call": (
        f"The question asks about the tower; search for it first.\n<|python_tag|>{_LH}<|eom_id|>"
    ),
    "malformed_json": '{"name": "search_corpus", "parameters": {"query": "Eiffel Tower',
    "no_call": "The tower is 330 m tall.",
}

_MH = '{"name": "search_corpus", "arguments": {"query": "Eiffel Tower height"}, "id": "a1b2c3d4e"}'
_MP = '{"name": "search_corpus", "arguments": {"query": "Paris population"}, "id": "f5g6h7i8j"}'
MISTRAL = {
    "one_call": f"[TOOL_CALLS][{_MH}]</s>",
    "two_calls": f"[TOOL_CALLS][{_MH}, {_MP}]</s>",
    "reasoning_then_call": (
        "[THINK]The question asks about the tower; search for it first.[/THINK]"
        '[TOOL_CALLS]search_corpus[ARGS]{"query": "Eiffel Tower height"}'
    ),
    "malformed_json": (
        '[TOOL_CALLS][{"name": "search_corpus", "arguments": {"query": "Eiffel Tower</s>'
    ),
    "no_call": "The tower is 330 m tall.</s>",
}
# MISTRAL["one_call"] as tekken_240911.json (v3) tokenizes it: [TOOL_CALLS] is id 9, </s> 2.
MISTRAL_ONE_CALL_IDS = [
    9, 1091, 19227, 2391, 2811, 1429, 8928, 3480, 1270, 22796, 1897, 1429, 61906, 2811, 16753,
    5272, 2811, 1429, 1069, 4940, 1299, 35549, 5806, 50666, 1429, 1327, 2811, 1429, 1097, 1049,
    1098, 1050, 1099, 1051, 1100, 1052, 1101, 1034, 27028, 2,
]  # fmt: skip
# The per-call forms of newer Mistral tokenizers: v13, and v11 with its call id.
MISTRAL_ARGS_TWO_CALLS = (
    '[TOOL_CALLS]search_corpus[ARGS]{"query": "Eiffel Tower height"}'
    '[TOOL_CALLS]search_corpus[ARGS]{"query": "Paris population"}'
)
MISTRAL_CALL_ID_ONE_CALL = (
    '[TOOL_CALLS]search_corpus[CALL_ID]a1b2c3d4e[ARGS]{"query": "Eiffel Tower height"}'
)

FAMILIES = {"hermes": HERMES, "harmony": HARMONY, "llama3_json": LLAMA3_JSON, "mistral": MISTRAL}
