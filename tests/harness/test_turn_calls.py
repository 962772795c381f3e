"""A turn's record carries its own calls; the harness closes what it was given; an episode's
end says whether the agent finished (terminated) or a budget cut it (truncated)."""

from __future__ import annotations

import socket

from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.llm.client import ModelCallRecord
from harness_app.harness.llm.verifier import LLMVerifier
from harness_app.harness.policies.base import PolicyError
from harness_app.harness.runner import iter_episode, run_episode
from harness_app.harness.types import Document, Observation, ToolCall
from harness_app.harness.verify import Verdict
from tests.fakes.openai_server import FakeOpenAIServer
from tests.harness.fakes import QUESTION, FakeRetriever, call

VERIFY = [call("verify", {"claim": "Ada was born in London", "doc_ids": ["Ada_Lovelace"]})]
SEARCH = [call("search_corpus", {"query": "Ada Lovelace"})]
END = [call("end_search", {"reasoning": "done"})]


class CallingPolicy:
    """Plays fixed turns and makes one model call per turn, as an LLM policy records them;
    past its turns it makes a failed call and gives up."""

    name = "calling"

    def __init__(self, turns: list[list[ToolCall]]) -> None:
        self.turns = turns
        self.made: list[tuple[int, ModelCallRecord]] = []
        self.taken = 0

    def reset(self, query_text: str) -> None:
        self.made, self.taken = [], 0

    def take_calls(self) -> list[tuple[int, ModelCallRecord]]:
        taken, self.taken = self.made[self.taken :], len(self.made)
        return taken

    def act(self, observation: Observation, state: object) -> list[ToolCall]:
        turn = observation.turn
        if turn >= len(self.turns):
            self.made.append((turn, ModelCallRecord(request={"turn": turn}, error="HTTP 500")))
            raise PolicyError("the model server failed")
        self.made.append((turn, ModelCallRecord(request={"turn": turn})))
        return self.turns[turn]


def test_each_turn_record_carries_the_model_and_verifier_calls_made_for_it():
    with FakeOpenAIServer(reply=lambda n, body: "verdict: yes\nrationale: it says so") as fake:
        verifier = LLMVerifier(fake.base_url, "judge")
        env = SearchHarness(FakeRetriever(), verifier=verifier)
        run = iter_episode(env, CallingPolicy([SEARCH, VERIFY]), QUESTION)
        records = list(run)
        result = run.result()
    assert [[turn for turn, _ in r.calls.model] for r in records] == [[], [0], [1]]
    assert [len(r.calls.verifier) for r in records] == [0, 0, 1]
    assert records[2].calls.verifier[0].verdict == "supported"
    # The policy's failed call on turn 2 broke the step off: no record holds it.
    [(turn, failed)] = result.unrecorded_calls.model
    assert (turn, failed.error) == (2, "HTTP 500")
    assert "calls" not in records[1].to_json()


def test_a_verifier_that_fails_leaves_its_calls_on_the_result():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    env = SearchHarness(FakeRetriever(), verifier=LLMVerifier(url, "judge", retries=0))
    result = run_episode(env, CallingPolicy([SEARCH, VERIFY]), QUESTION)
    assert result.termination_reason == "verifier_unreachable"
    assert [c.error != "" for c in result.unrecorded_calls.verifier] == [True]
    assert [turn for turn, _ in result.unrecorded_calls.model] == [1]


class Service:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class ClosingRetriever(FakeRetriever, Service):
    def __init__(self) -> None:
        FakeRetriever.__init__(self)
        Service.__init__(self)


class ClosingVerifier(Service):
    def verify(self, claim: str, document: Document) -> Verdict:
        return Verdict("supported", 1.0, ())


def test_the_harness_closes_the_services_it_was_given():
    retriever, verifier = ClosingRetriever(), ClosingVerifier()
    with SearchHarness(retriever, verifier=verifier) as env:
        env.reset(QUESTION)
        assert not retriever.closed and not verifier.closed
    assert retriever.closed and verifier.closed
    SearchHarness(FakeRetriever()).close()  # nothing to close: no error


def test_ending_the_search_terminates_and_a_budget_truncates():
    env = SearchHarness(FakeRetriever(), config=HarnessConfig(max_turns=2))
    env.reset(QUESTION)
    ended = env.step(END)
    assert (ended.terminated, ended.truncated, ended.done) == (True, False, True)

    env.reset(QUESTION)
    assert not env.step(SEARCH).done
    cut = env.step(SEARCH)
    assert (cut.terminated, cut.truncated, cut.termination_reason) == (False, True, "max_turns")
    after = env.step(END)  # a step after the end changes nothing
    assert (after.terminated, after.truncated) == (False, True)

    env = SearchHarness(FakeRetriever(), config=HarnessConfig(context_token_limit=10))
    env.reset(QUESTION)
    over = env.step(SEARCH)
    assert (over.truncated, over.termination_reason) == (True, "context_budget")


def test_repeated_format_errors_terminate_the_episode():
    env = SearchHarness(FakeRetriever(), config=HarnessConfig(max_format_error_turns=2))
    env.reset(QUESTION)
    env.step([call("nope")])
    broken = env.step([call("nope")])
    assert (broken.terminated, broken.truncated) == (True, False)
    assert broken.termination_reason == "format_errors"


def test_the_turn_record_says_how_the_episode_ended():
    env = SearchHarness(FakeRetriever(), config=HarnessConfig(max_turns=1))
    records = list(iter_episode(env, CallingPolicy([SEARCH, SEARCH]), QUESTION))
    assert [(r.terminated, r.truncated) for r in records] == [(False, False), (False, True)]
    assert records[-1].to_json()["done"] is True
