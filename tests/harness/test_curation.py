"""Curated set rules: capacity, strictly-below eviction, refusal, retag, auto-seed."""

from __future__ import annotations

from harness_app.harness.ablation import Ablation
from harness_app.harness.curation import apply_curation
from harness_app.harness.state import HarnessState
from tests.harness.fakes import call, make_env, step1

ENGINE_QUERY = {"query": "Analytical Engine Babbage program"}


def _state(tags: dict[str, str]) -> HarnessState:
    state = HarnessState(query_id="q", question="?")
    for doc_id in tags:
        state.shown[doc_id] = 0
    apply_curation(state, add=list(tags.items()), remove=[], capacity=len(tags), tags_enabled=True)
    state.curation_log.clear()
    state.turn = 1
    return state


def _add(state: HarnessState, doc_id: str, tag: str | None, capacity: int = 3):
    state.shown[doc_id] = state.turn
    return apply_curation(
        state, add=[(doc_id, tag)], remove=[], capacity=capacity, tags_enabled=True
    )


def test_full_set_evicts_the_earliest_doc_of_the_lowest_tag_when_strictly_below():
    state = _state({"a": "high", "b": "low", "c": "low"})
    outcome = _add(state, "d", "fair")
    assert outcome.evicted == [("b", "d")]
    assert list(state.curated) == ["a", "c", "d"]
    assert [(e.kind, e.doc_id, e.detail) for e in state.curation_log] == [
        ("evicted", "b", "d"),
        ("added", "d", ""),
    ]


def test_full_set_refuses_an_add_whose_tag_is_not_strictly_above_the_lowest():
    state = _state({"a": "high", "b": "fair", "c": "fair"})
    outcome = _add(state, "d", "fair")
    assert outcome.refused == ["d"] and outcome.evicted == []
    assert "d" not in state.curated and len(state.curated) == 3
    assert state.curation_log[-1].kind == "refused"
    assert "REFUSED" in outcome.summary(state, 3) and "remove a doc" in outcome.summary(state, 3)


def test_retag_of_a_curated_doc_needs_no_room():
    state = _state({"a": "high", "b": "fair", "c": "fair"})
    outcome = _add(state, "b", "very_high")
    assert outcome.retagged == ["b"] and state.curated["b"].importance == "very_high"
    event = state.curation_log[-1]
    assert (event.kind, event.importance, event.detail) == ("retagged", "very_high", "fair")


def test_very_high_evicts_high_when_nothing_lower_is_curated():
    state = _state({"a": "high", "b": "very_high", "c": "high"})
    assert _add(state, "d", "very_high").evicted == [("a", "d")]


def test_without_tags_everything_is_fair_and_a_full_set_refuses():
    state = _state({"a": "fair", "b": "fair", "c": "fair"})
    state.shown["d"] = 1
    outcome = apply_curation(
        state, add=[("d", "very_high")], remove=[], capacity=3, tags_enabled=False
    )
    assert outcome.refused == ["d"]


def test_removal_runs_before_adds_so_a_swap_fits_in_one_call():
    state = _state({"a": "fair", "b": "fair", "c": "fair"})
    state.shown["d"] = 1
    outcome = apply_curation(
        state, add=[("d", "fair")], remove=["a"], capacity=3, tags_enabled=True
    )
    assert outcome.removed == ["a"] and outcome.added == ["d"]
    assert [e.kind for e in state.curation_log] == ["removed", "added"]


def test_auto_seed_puts_the_first_search_top_eight_into_the_empty_set_at_fair():
    env = make_env()
    result = step1(env, "search_corpus", ENGINE_QUERY)
    seeded = env.state.searches[0].hit_ids[:8]
    assert list(env.state.curated) == seeded
    assert {item.importance for item in env.state.curated.values()} == {"fair"}
    assert all(e.detail == "auto_seed" for e in env.state.curation_log)
    assert "Auto-seeded the empty curated set with the top 8" in result.content
    step1(env, "search_corpus", {"query": "Bletchley Park Turing"})
    assert len(env.state.curated) == 8


def test_auto_seed_skips_a_set_that_is_not_empty():
    env = make_env()
    step1(env, "read_document", {"doc_id": "Grace_Hopper"})
    step1(env, "curate", {"add_ids": ["Grace_Hopper"]})
    step1(env, "search_corpus", ENGINE_QUERY)
    assert list(env.state.curated) == ["Grace_Hopper"]


def test_curate_through_the_env_reports_evictions_and_importance_only_adds():
    env = make_env(Ablation().without("auto_seed"), curated_capacity=2)
    step1(env, "search_corpus", ENGINE_QUERY)
    first, second, third = env.state.searches[0].hit_ids[:3]
    step1(env, "curate", {"add_ids": [first, second], "importance": {first: "low"}})
    result = step1(env, "curate", {"importance": {third: "high"}})
    assert result.ok and f"evicted {first} (for {third})" in result.content
    assert env.state.curated_ids() == {second, third}
    assert [e.kind for e in env.state.evictions()] == ["evicted"]
    assert {e.kind for e in env.state.events_at(env.state.turn)} == {"evicted", "added"}


def test_curate_rejects_contradictions_and_notes_harmless_removals():
    env = make_env()
    step1(env, "search_corpus", ENGINE_QUERY)
    doc = env.state.searches[0].hit_ids[-1]
    clash = step1(env, "curate", {"add_ids": [doc], "remove_ids": [doc]})
    assert not clash.ok and "both added and removed" in clash.error
    env.step([call("curate", {"remove_ids": [doc]})])
    noop = step1(env, "curate", {"remove_ids": [doc]})
    assert noop.ok and f"not curated, nothing removed: {doc}" in noop.content
