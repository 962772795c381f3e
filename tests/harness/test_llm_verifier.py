"""The LLM verifier: the judge's answer parsed, every call recorded, a down server named.

The server is the project's fake OpenAI-compatible one; the test against the real vLLM is
at the end (skipped without VLLM_TEST_BASE_URL).
"""

from __future__ import annotations

import socket

import pytest

from harness_app.harness.env import SearchHarness
from harness_app.harness.llm.verifier import (
    DOC_CHARS,
    LLMVerifier,
    VerifierError,
    parse_verdict,
)
from harness_app.harness.policies.base import PolicyError
from harness_app.harness.runner import run_episode
from harness_app.harness.types import Document, ToolCall
from harness_app.harness.verify import Verifier
from tests.fakes.openai_server import FakeOpenAIServer
from tests.harness.fakes import DOCS, QUESTION, FakeRetriever, call
from tests.vllm import VLLM_URL, base_model, needs_vllm

ADA = DOCS[0]


# --- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "verdict", "rationale"),
    [
        ("verdict: yes\nrationale: born in London.", "supported", "born in London."),
        ("Verdict: NO\nRationale: the text says Paris.", "unsupported", "the text says Paris."),
        (
            "**Verdict:** Yes\n**Rationale:** stated in the first sentence",
            "supported",
            "stated in the first sentence",
        ),
        (
            "Let me check.\nverdict = no. The claim's year is wrong.",
            "unsupported",
            "The claim's year is wrong.",
        ),
        ("The document says so.\n\nVERDICT: yes", "supported", "The document says so."),
        ('{"verdict": "yes", "rationale": "it says so"}', "supported", "it says so"),
        ("verdict - yes", "supported", ""),
    ],
)
def test_a_verdict_is_read_whatever_its_case_markup_or_surrounding_text(reply, verdict, rationale):
    parsed = parse_verdict(reply)
    assert (parsed.verdict, parsed.rationale) == (verdict, rationale)


@pytest.mark.parametrize(
    "reply",
    [
        "I think the document supports it.",
        "verdict: maybe\nrationale: hard to say",
        "verdict: yes|no",  # the format echoed back, not an answer
        "verdict: yes\nverdict: no",  # both
        "",
    ],
)
def test_an_answer_without_one_clear_verdict_is_unclear_and_keeps_the_raw_text(reply):
    parsed = parse_verdict(reply)
    assert parsed.verdict == "unclear"
    assert parsed.rationale == reply.strip()


# --- against the fake server ------------------------------------------------------------------


def test_the_judge_gets_the_claim_and_the_first_6000_characters_at_temperature_0():
    long_doc = Document("Long", "A long page", "x" * DOC_CHARS + "TAIL-NOT-SENT")
    with FakeOpenAIServer(reply=lambda n, body: "verdict: yes\nrationale: ok") as server:
        verifier = LLMVerifier(server.base_url, "fake-model")
        verdict = verifier.verify("Ada was born in London", long_doc)
    body = server.requests[0]["body"]
    assert body["temperature"] == 0.0 and body["model"] == "fake-model"
    prompt = body["messages"][-1]["content"]
    assert "Ada was born in London" in prompt and "A long page" in prompt
    assert "x" * DOC_CHARS in prompt and "TAIL-NOT-SENT" not in prompt
    assert (verdict.verdict, verdict.score, verdict.rationale) == ("supported", 1.0, "ok")
    assert verdict.evidence == ("ok",)


def test_each_call_is_recorded_with_usage_latency_model_and_token_ids():
    with FakeOpenAIServer(reply=lambda n, body: "verdict: no\nrationale: 1815, not 1816") as fake:
        verifier = LLMVerifier(fake.base_url, "fake-model")
        verifier.verify("Ada Lovelace was born in 1816", ADA)
        verifier.verify("Ada Lovelace died in 1852", ADA)
    calls = verifier.take_calls()
    assert verifier.take_calls() == []  # taken once
    assert [(c.doc_id, c.verdict) for c in calls] == [
        ("Ada_Lovelace", "unsupported"),
        ("Ada_Lovelace", "unsupported"),
    ]
    first = calls[0]
    assert first.model == "fake-model" and first.base_url == fake.base_url
    assert first.completion == "verdict: no\nrationale: 1815, not 1816"
    assert first.rationale == "1815, not 1816" and first.error == ""
    assert first.prompt_tokens == len(first.prompt_token_ids) > 0
    assert first.completion_tokens == len(first.completion_token_ids) > 0
    assert first.latency_ms > 0


def test_without_token_capture_no_token_ids_are_asked_for_and_the_call_still_counts():
    with FakeOpenAIServer(reply=lambda n, body: "verdict: yes") as fake:
        verifier = LLMVerifier(fake.base_url, "fake-model", capture_tokens=False)
        verifier.verify("Ada", ADA)
    assert "return_token_ids" not in fake.requests[0]["body"]
    (record,) = verifier.take_calls()
    assert record.prompt_token_ids == [] and record.prompt_tokens > 0


def test_an_unparseable_answer_is_an_unclear_verdict_not_an_error():
    with FakeOpenAIServer(reply=lambda n, body: "The document is about Ada.") as fake:
        verdict = LLMVerifier(fake.base_url, "fake-model").verify("Ada", ADA)
    assert (verdict.verdict, verdict.score) == ("unclear", 0.5)
    assert verdict.rationale == "The document is about Ada."


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_down_verifier_raises_an_error_naming_its_url_and_keeps_the_failed_calls():
    url = _closed_port_url()
    verifier = LLMVerifier(url, "m", timeout_s=2.0, retries=1)
    with pytest.raises(VerifierError) as caught:
        verifier.verify("Ada", ADA)
    assert caught.value.reason == "verifier_unreachable"
    assert f"verifier at {url} unreachable" in str(caught.value)
    calls = verifier.take_calls()
    assert len(calls) == 2  # the first try and one retry
    assert all(c.error.startswith("model_unreachable") and c.verdict == "" for c in calls)


def test_a_server_error_status_is_a_verifier_error_with_the_status():
    with FakeOpenAIServer(refuse={"chat/completions": 500}) as fake:
        verifier = LLMVerifier(fake.base_url, "m", retries=0)
        with pytest.raises(VerifierError) as caught:
            verifier.verify("Ada", ADA)
    assert caught.value.reason == "verifier_error"
    assert f"verifier at {fake.base_url} failed: HTTP 500" in str(caught.value)


def test_a_slow_verifier_times_out_within_its_bound():
    with FakeOpenAIServer(delay_s=3.0) as fake:
        verifier = LLMVerifier(fake.base_url, "m", timeout_s=0.5, retries=0)
        with pytest.raises(VerifierError) as caught:
            verifier.verify("Ada", ADA)
    assert caught.value.reason == "verifier_unreachable"
    assert "timed out" in str(caught.value)


# --- in the harness ---------------------------------------------------------------------------


class _Script:
    """A policy that plays fixed turns."""

    name = "script"

    def __init__(self, turns: list[list[ToolCall]]) -> None:
        self.turns = turns

    def reset(self, query_text: str) -> None:
        self.n = 0

    def act(self, observation, state):
        if self.n >= len(self.turns):
            raise PolicyError("script over")
        self.n += 1
        return self.turns[self.n - 1]


_READ_THEN_VERIFY = [
    [call("read_document", {"doc_id": "Ada_Lovelace"})],
    [call("verify", {"claim": "Ada was born in London", "doc_ids": ["Ada_Lovelace"]})],
    [call("end_search", {"reasoning": "done"})],
]


def test_the_harness_records_the_models_verdict_with_its_rationale_as_evidence():
    reply = "verdict: yes\nrationale: the first sentence says London, 1815."
    with FakeOpenAIServer(reply=lambda n, body: reply) as fake:
        verifier = LLMVerifier(fake.base_url, "fake-model")
        assert isinstance(verifier, Verifier)
        result = run_episode(
            SearchHarness(FakeRetriever(), verifier=verifier), _Script(_READ_THEN_VERIFY), QUESTION
        )
    assert result.termination_reason == "end_search"
    observation = result.turns[2].tool_results[0]["content"]
    assert 'Ada_Lovelace: supported (1.00) — "the first sentence says London, 1815."' in observation
    assert result.turns[-1].state["verifications"][0]["verdict"] == "supported"


def test_a_down_verifier_ends_the_episode_with_its_reason_and_url():
    url = _closed_port_url()
    env = SearchHarness(FakeRetriever(), verifier=LLMVerifier(url, "m", timeout_s=2.0))
    result = run_episode(env, _Script(_READ_THEN_VERIFY), QUESTION)
    assert result.termination_reason == "verifier_unreachable"
    assert url in result.error
    assert [t.turn for t in result.turns] == [0, 1]  # the failed turn is not recorded
    assert env.state.verifications == []  # nothing half-written


# --- the real vLLM ----------------------------------------------------------------------------


@needs_vllm
def test_the_real_vllm_judges_a_claim_and_its_call_is_recorded_token_by_token():
    verifier = LLMVerifier(VLLM_URL, base_model(), timeout_s=120.0)
    verdict = verifier.verify("Ada Lovelace was born in London in 1815.", ADA)
    (record,) = verifier.take_calls()
    assert record.error == ""
    assert verdict.verdict in ("supported", "unsupported", "unclear")
    assert record.verdict == verdict.verdict and record.completion
    if verdict.verdict == "unclear":  # a 135M model may ramble: the raw text is kept
        assert verdict.rationale == record.completion.strip()[: len(verdict.rationale)]
    assert record.prompt_tokens == len(record.prompt_token_ids) > 0
    assert record.completion_tokens == len(record.completion_token_ids) > 0
    assert record.model == base_model() and record.latency_ms > 0
