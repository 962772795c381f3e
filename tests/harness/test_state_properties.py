"""Property tests: any sequence of tool calls, valid or not, keeps the state consistent."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_app.harness.ablation import MECHANISMS, Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.state import HarnessState, consistency_problems
from harness_app.harness.types import ToolCall
from tests.harness.fakes import DOCS, QUESTION, FakeRetriever

RETRIEVER = FakeRetriever()  # read-only, so one instance serves every example
IDS = [d.doc_id for d in DOCS] + ["Nope", ""]
WORDS = ["engine", "Babbage", "loom", "Lovelace", "Turing", "card", "museum", "the", "zebra"]
TAGS = ["very_high", "high", "fair", "low", "medium"]

ids = st.lists(st.sampled_from(IDS), max_size=7)
query = st.lists(st.sampled_from(WORDS), min_size=0, max_size=4).map(" ".join)
tool_names = ["search_corpus", "fan_out_search", "grep_corpus", "read_document", "review_docs"]
tool_names += ["curate", "verify", "end_search", "delete_everything"]

valid_calls = st.one_of(
    st.builds(lambda q: ToolCall("search_corpus", {"query": q}), query),
    st.builds(lambda qs: ToolCall("fan_out_search", {"queries": qs}), st.lists(query, max_size=6)),
    st.builds(
        lambda p: ToolCall("grep_corpus", {"pattern": p}),
        st.sampled_from(["Babbage", "punched cards?", "(a+)+", "[", "x*", "\\d{4}"]),
    ),
    st.builds(lambda d: ToolCall("read_document", {"doc_id": d}), st.sampled_from(IDS)),
    st.builds(lambda d: ToolCall("review_docs", {"doc_ids": d}), ids),
    st.builds(
        lambda a, r, tags: ToolCall("curate", {"add_ids": a, "remove_ids": r, "importance": tags}),
        ids,
        ids,
        st.dictionaries(st.sampled_from(IDS), st.sampled_from(TAGS), max_size=4),
    ),
    st.builds(lambda c, d: ToolCall("verify", {"claim": c, "doc_ids": d}), query, ids),
)
garbage_calls = st.builds(
    ToolCall,
    st.sampled_from(tool_names),
    st.one_of(
        st.text(max_size=20),
        st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=5), ids)),
    ),
)
turns = st.lists(
    st.lists(st.one_of(valid_calls, valid_calls, garbage_calls), max_size=3), min_size=1, max_size=8
)
ablations = st.sets(st.sampled_from(MECHANISMS)).map(lambda off: Ablation().without(*off))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=turns, ablation=ablations, capacity=st.integers(1, 6))
def test_random_episodes_keep_the_state_consistent(script, ablation, capacity):
    config = HarnessConfig(curated_capacity=capacity, max_turns=6, auto_seed_count=3)
    env = SearchHarness(RETRIEVER, config=config, ablation=ablation)
    env.reset(QUESTION)
    for calls in script:
        was_done = env.state.done
        obs = env.step(calls)
        state = env.state
        assert consistency_problems(state, capacity) == []
        # Every call is answered; a live turn without calls gets one error result.
        assert len(obs.tool_results) == (len(calls) if was_done else max(len(calls), 1))
        snapshot = json.loads(json.dumps(state.to_json()))
        assert HarnessState.from_json(snapshot) == state
        assert HarnessState.from_json(snapshot).to_json() == snapshot
        assert obs.done == state.done
        if state.done:
            assert state.termination_reason in {
                "end_search",
                "max_turns",
                "format_errors",
                "context_budget",
            }
    assert env.state.turns_used <= config.max_turns
    assert env.state.turns_used <= env.state.turn <= config.max_steps


@settings(max_examples=40, deadline=None)
@given(script=turns)
def test_format_errors_count_failed_calls_and_tool_counts_count_the_rest(script):
    env = SearchHarness(RETRIEVER, config=HarnessConfig(max_turns=50, max_format_error_turns=99))
    env.reset(QUESTION)
    failed = succeeded = 0
    for calls in script:
        if env.state.done:
            break
        obs = env.step(calls)
        failed += sum(1 for r in obs.tool_results if not r.ok)
        succeeded += sum(
            1 for r in obs.tool_results if r.ok and not r.content.startswith("not run")
        )
    assert env.state.format_errors == failed
    assert sum(env.state.tool_counts.values()) == succeeded
