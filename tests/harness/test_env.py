"""SearchHarness end to end over the fake corpus: tools, malformed actions, termination."""

from __future__ import annotations

import json

import pytest

from harness_app.harness.ablation import MECHANISMS, REFERENCE_CONDITIONS, Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.state import HarnessState
from harness_app.harness.types import Document
from tests.harness.fakes import DOCS, QUESTION, FakeRetriever, call, make_env, step1

ENGINE_QUERY = {"query": "Analytical Engine Babbage program"}


def test_reset_shows_question_in_working_memory_at_turn_zero():
    env = SearchHarness(FakeRetriever())
    obs = env.reset(QUESTION)
    assert obs.turn == 0 and not obs.done and obs.tool_results == []
    assert f"QUESTION: {QUESTION.text}" in obs.text
    assert obs.text == obs.working_memory
    assert env.state.tokens_used > 0


def test_tool_schemas_are_openai_function_definitions():
    schemas = SearchHarness(FakeRetriever()).tool_schemas()
    names = [s["function"]["name"] for s in schemas]
    assert names == [
        "search_corpus",
        "fan_out_search",
        "grep_corpus",
        "read_document",
        "review_docs",
        "curate",
        "verify",
        "end_search",
    ]
    for schema in schemas:
        assert schema["type"] == "function"
        assert schema["function"]["parameters"]["type"] == "object"
        json.dumps(schema)


def test_search_fills_pool_memory_and_shown_and_excludes_returned_docs():
    retriever = FakeRetriever()
    env = make_env(retriever=retriever, search_k=3)
    first = step1(env, "search_corpus", ENGINE_QUERY)
    assert first.ok
    shown_after_first = env.state.shown_ids
    # Three docs shown in full: the hidden near-duplicate was backfilled.
    assert len(env.state.pool) == 3 and len(env.state.suppressed) == 1
    entry = next(iter(env.state.pool.values()))
    assert entry.first_turn == 1 and entry.query == ENGINE_QUERY["query"] and entry.score > 0
    step1(env, "search_corpus", ENGINE_QUERY)
    # Every doc returned before is excluded: those shown and the hidden near-duplicate.
    assert retriever.calls[-1][2] == shown_after_first | set(env.state.suppressed)
    assert not shown_after_first & set(env.state.searches[-1].hit_ids)


def test_fan_out_runs_each_query_and_limits_to_five():
    env = make_env(fan_out_k=2)
    result = step1(env, "fan_out_search", {"queries": ["Jacquard loom", "Bletchley Park"]})
    assert result.ok
    assert [r.query for r in env.state.searches] == ["Jacquard loom", "Bletchley Park"]
    too_many = step1(env, "fan_out_search", {"queries": ["a b"] * 6})
    assert not too_many.ok and "at most 5" in too_many.error
    empty = step1(env, "fan_out_search", {"queries": []})
    assert not empty.ok and "at least 1" in empty.error


def test_read_document_shows_bounded_full_text_and_marks_it_read():
    env = make_env(read_max_chars=40)
    result = step1(env, "read_document", {"doc_id": "Grace_Hopper"})
    assert result.ok
    assert DOCS[11].text[:40] in result.content and "more characters not shown" in result.content
    assert env.state.memory["Grace_Hopper"].read
    assert "Grace_Hopper" in env.state.shown_ids


def test_review_docs_recalls_memory_and_names_unseen_ids():
    env = make_env()
    step1(env, "search_corpus", ENGINE_QUERY)
    seen = next(iter(env.state.memory))
    ok = step1(env, "review_docs", {"doc_ids": [seen]})
    assert ok.ok and next(d for d in DOCS if d.doc_id == seen).text[:200] in ok.content
    bad = step1(env, "review_docs", {"doc_ids": [seen, "Grace_Hopper", "Nope"]})
    assert not bad.ok and "Grace_Hopper, Nope" in bad.error


def test_end_search_ends_and_later_steps_change_nothing():
    env = make_env()
    obs = env.step([call("end_search", {"reasoning": "enough"}), call("curate", {"add_ids": []})])
    assert obs.done and obs.termination_reason == "end_search"
    assert "not run" in obs.tool_results[1].content
    assert env.state.final_reasoning == "enough"
    snapshot = env.state.to_json()
    after = env.step([call("search_corpus", ENGINE_QUERY)])
    assert after.done and not after.tool_results[0].ok
    assert env.state.to_json() == snapshot


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("teleport", {}, "unknown tool 'teleport'"),
        ("search_corpus", "{not json", "not valid JSON"),
        ("search_corpus", "[1, 2]", "must be a JSON object, got array"),
        ("search_corpus", {}, "missing required field 'query'"),
        ("search_corpus", {"query": "x", "k": 50}, "unexpected field 'k'"),
        ("search_corpus", {"query": 7}, "field 'query' must be a string, got number"),
        ("search_corpus", {"query": "   "}, "field 'query' must not be empty"),
        ("verify", {"claim": "c", "doc_ids": ["a", "b", "c", "d", "e", "f"]}, "at most 5"),
        ("review_docs", {"doc_ids": "Ada_Lovelace"}, "must be an array, got string"),
        ("read_document", {"doc_id": "No_Such_Doc"}, "unknown doc id 'No_Such_Doc'"),
        ("curate", {"add_ids": ["Grace_Hopper"]}, "not shown in this episode: Grace_Hopper"),
        ("curate", {"importance": {"x": "medium"}}, "must be one of very_high"),
        ("curate", {}, "nothing to do"),
        ("verify", {"claim": "c", "doc_ids": ["Nope"]}, "not shown in this episode: Nope"),
        ("grep_corpus", {"pattern": "(unclosed"}, "invalid regular expression"),
        ("grep_corpus", {"pattern": "(a+)+$"}, "nested quantifiers"),
    ],
)
def test_malformed_actions_become_format_errors_with_exact_messages(name, arguments, expected):
    env = make_env()
    obs = env.step([call(name, arguments, call_id="c9")])
    result = obs.tool_results[0]
    assert not result.ok and result.call_id == "c9"
    assert expected in result.error and result.content == f"ERROR: {result.error}"
    assert env.state.format_errors == 1 and env.state.tool_counts == {}
    assert not obs.done


def test_turn_without_calls_and_calls_over_the_limit_are_format_errors():
    env = make_env(max_calls_per_turn=1)
    empty = env.step([])
    assert not empty.tool_results[0].ok and "no tool call" in empty.tool_results[0].error
    obs = env.step([call("search_corpus", ENGINE_QUERY), call("search_corpus", ENGINE_QUERY)])
    assert obs.tool_results[0].ok and not obs.tool_results[1].ok
    assert env.state.format_errors == 2 and env.state.tool_counts == {"search_corpus": 1}


def test_consecutive_error_turns_end_the_episode_and_a_good_turn_resets_the_count():
    env = make_env(max_format_error_turns=3)
    env.step([call("nope")])
    env.step([call("nope")])
    env.step([call("search_corpus", ENGINE_QUERY)])
    assert env.state.error_streak == 0
    env.step([call("nope")])
    env.step([call("nope")])
    obs = env.step([call("nope")])
    assert obs.done and obs.termination_reason == "format_errors"
    assert "ENDED: format_errors" in obs.working_memory


def test_max_turns_ends_the_episode():
    env = make_env(max_turns=2)
    assert not env.step([call("search_corpus", ENGINE_QUERY)]).done
    obs = env.step([call("search_corpus", {"query": "loom"})])
    assert obs.done and obs.termination_reason == "max_turns" and env.state.turn == 2


def test_context_budget_ends_the_episode_once_the_estimate_passes_the_limit():
    env = make_env(context_token_limit=600)
    obs = env.step([call("search_corpus", ENGINE_QUERY)])
    assert obs.done and obs.termination_reason == "context_budget"
    assert env.state.tokens_used > 600
    assert obs.info["tokens_used"] == env.state.tokens_used


def test_tool_counts_count_only_successful_calls():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY), call("search_corpus", {}), call("nope")])
    assert env.state.tool_counts == {"search_corpus": 1}
    assert env.state.format_errors == 2


def test_observation_info_reports_new_ids_and_curation_diff():
    env = make_env()
    obs = env.step([call("search_corpus", ENGINE_QUERY)])
    assert obs.info["new_shown"] == list(env.state.shown)
    assert {e["kind"] for e in obs.info["curation_events"]} == {"added"}


def test_restore_from_json_continues_exactly_like_the_original():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY)])
    env.step([call("curate", {"importance": {"Ada_Lovelace": "very_high"}})])
    snapshot = json.loads(json.dumps(env.state.to_json()))
    clone = SearchHarness.restore(FakeRetriever(), HarnessState.from_json(snapshot))
    follow_up = [call("search_corpus", {"query": "Analytical Engine punched cards mill"})]
    assert clone.step(follow_up).text == env.step(follow_up).text
    assert clone.state == env.state


# -- ablations -------------------------------------------------------------------------


def test_ablation_values():
    ablation = Ablation().without("dedup", "compression")
    assert not ablation.dedup and not ablation.compression and ablation.auto_seed
    assert ablation.label == "-compression-dedup"
    assert Ablation().label == "full"
    assert Ablation.from_label("-dedup-compression") == ablation
    assert Ablation.from_json(ablation.to_json()) == ablation
    assert set(Ablation().to_json()) == set(MECHANISMS)
    with pytest.raises(ValueError, match="'dedupe'"):
        Ablation().without("dedupe")


def test_without_auto_seed_the_first_search_curates_nothing():
    full, ablated = make_env(), make_env(Ablation().without("auto_seed"))
    assert "Auto-seeded" in step1(full, "search_corpus", ENGINE_QUERY).content
    assert len(full.state.curated) == 8
    assert "Auto-seeded" not in step1(ablated, "search_corpus", ENGINE_QUERY).content
    assert ablated.state.curated == {}


def test_without_importance_tags_every_doc_is_fair_and_tags_are_ignored():
    env = make_env(Ablation().without("importance_tags", "auto_seed"))
    step1(env, "search_corpus", ENGINE_QUERY)
    result = step1(
        env, "curate", {"add_ids": ["Ada_Lovelace"], "importance": {"Ada_Lovelace": "high"}}
    )
    assert result.ok and "tags are disabled" in result.content
    assert env.state.curated["Ada_Lovelace"].importance == "fair"
    # The interface is left as it was: curate still advertises importance.
    assert _schema(env, "curate") == _schema(make_env(), "curate")
    # The earlier behaviour under its switch: the field is not advertised.
    old = make_env(Ablation().without("importance_tags"), keep_ablated_tools=False)
    assert "importance" not in _schema(old, "curate")["function"]["parameters"]["properties"]


def _schema(env: SearchHarness, name: str) -> dict:
    return next(s for s in env.tool_schemas() if s["function"]["name"] == name)


def test_without_compression_hits_show_the_leading_snippet():
    full = make_env(search_k=1)
    plain = make_env(Ablation().without("compression"), search_k=1, snippet_chars=60)
    query = {"query": "Lucasian Chair Trinity College Cambridge"}
    compressed = step1(full, "search_corpus", query).content.splitlines()[1]
    leading = step1(plain, "search_corpus", query).content.splitlines()[1]
    assert "Lucasian Chair" in compressed
    assert "Lucasian Chair" not in leading
    assert "Charles Babbage was an English polymath" in leading


def test_without_dedup_near_duplicates_are_shown():
    full, ablated = make_env(), make_env(Ablation().without("dedup"))
    assert (
        "Analytical_Engine_copy≈Analytical_Engine"
        in step1(full, "search_corpus", ENGINE_QUERY).content
    )
    content = step1(ablated, "search_corpus", ENGINE_QUERY).content
    assert "- Analytical_Engine_copy" in content and ablated.state.suppressed == {}


def test_without_evidence_graph_no_graph_and_no_bridges():
    env = make_env(Ablation().without("evidence_graph"))
    obs = env.step([call("search_corpus", ENGINE_QUERY)])
    assert env.state.graph.docs == {} and "BRIDGES" not in obs.working_memory
    assert "BRIDGES" in make_env().step([call("search_corpus", ENGINE_QUERY)]).working_memory


@pytest.mark.parametrize(
    ("mechanism", "tool"), [("review_docs", "review_docs"), ("verification", "verify")]
)
def test_ablated_tools_stay_in_the_schemas_and_answer_that_they_are_unavailable(mechanism, tool):
    env = make_env(Ablation().without(mechanism))
    assert env.tool_schemas() == make_env().tool_schemas()
    step1(env, "search_corpus", ENGINE_QUERY)
    obs = env.step([call(tool, {"doc_ids": ["Ada_Lovelace"], "claim": "x"})])
    result = obs.tool_results[0]
    assert result.ok and f"{tool} is unavailable in this condition" in result.content
    # Not a format error, not a use of the tool; the turn counts like any action.
    assert env.state.format_errors == 0 and env.state.error_streak == 0
    assert tool not in env.state.tool_counts and env.state.turns_used == 2
    assert env.state.verifications == [] and not obs.done
    # Three in a row do not end the episode the way three format failures do.
    for _ in range(3):
        assert not env.step([call(tool, {"doc_ids": ["Ada_Lovelace"]})]).done


@pytest.mark.parametrize(
    ("mechanism", "tool"), [("review_docs", "review_docs"), ("verification", "verify")]
)
def test_with_the_switch_ablated_tools_are_absent_and_unknown(mechanism, tool):
    env = make_env(Ablation().without(mechanism), keep_ablated_tools=False)
    assert tool not in [s["function"]["name"] for s in env.tool_schemas()]
    result = step1(env, tool, {"doc_ids": ["Ada_Lovelace"], "claim": "x"})
    assert not result.ok and f"unknown tool {tool!r}" in result.error


def test_all_mechanisms_off_keeps_the_full_interface():
    all_off = REFERENCE_CONDITIONS["all_harness_mechanisms_disabled"]
    assert all_off.disabled == MECHANISMS
    assert make_env(all_off).tool_schemas() == make_env().tool_schemas()


def test_without_budget_marker_the_budget_is_enforced_but_not_shown():
    env = make_env(Ablation().without("budget_marker"), max_turns=1)
    obs = env.step([call("search_corpus", ENGINE_QUERY)])
    assert "BUDGET" not in obs.working_memory
    assert obs.done and obs.termination_reason == "max_turns"


def test_interleaved_episodes_with_different_ablations_do_not_interfere():
    script = [
        [call("search_corpus", ENGINE_QUERY)],
        [call("curate", {"importance": {"Ada_Lovelace": "very_high"}})],
        [call("fan_out_search", {"queries": ["punched cards loom", "Bletchley Park Turing"]})],
        [
            call(
                "verify",
                {"claim": "Ada Lovelace translated the paper", "doc_ids": ["Ada_Lovelace"]},
            )
        ],
    ]
    ablations = [Ablation(), Ablation().without("dedup", "compression", "importance_tags")]

    def run_alone(ablation: Ablation) -> list[str]:
        env = make_env(ablation)
        return [env.step(turn).text for turn in script]

    alone = [run_alone(a) for a in ablations]
    first, second = make_env(ablations[0]), make_env(ablations[1])
    interleaved: list[list[str]] = [[], []]
    for turn in script:
        interleaved[0].append(first.step(turn).text)
        interleaved[1].append(second.step(turn).text)
    assert interleaved == alone
    assert interleaved[0] != interleaved[1]


def test_config_round_trips_and_rejects_unknown_fields():
    config = HarnessConfig(max_turns=12, budget_warnings=(0.5, 0.9))
    assert HarnessConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    with pytest.raises(ValueError, match="max_turn"):
        HarnessConfig.from_json({"max_turn": 3})
    with pytest.raises(ValueError, match="max_turns"):
        HarnessConfig(max_turns=0)


# -- what counts as a turn (issue 17, item 4) -----------------------------------------------


def test_format_error_turns_and_an_end_search_only_turn_do_not_count():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY)])
    env.step([call("nope")])  # every call failed
    env.step([])  # no call: one format error
    assert (env.state.turn, env.state.turns_used) == (3, 1)
    obs = env.step([call("curate", {"add_ids": ["Ada_Lovelace"]}), call("nope")])
    assert env.state.turns_used == 2  # one call succeeded: the turn counts
    assert "BUDGET turn 2/40" in obs.working_memory  # the marker shows counted turns
    env.step([call("end_search")])
    assert (env.state.turn, env.state.turns_used) == (5, 2)


def test_max_turns_counts_turns_not_steps():
    env = make_env(max_turns=2)
    env.step([call("search_corpus", ENGINE_QUERY)])
    assert not env.step([call("nope")]).done  # an error turn leaves the budget alone
    obs = env.step([call("search_corpus", {"query": "loom"})])
    assert obs.done and obs.termination_reason == "max_turns"
    assert (env.state.turn, env.state.turns_used) == (3, 2)
    # Records and snapshots keep the step index.
    assert obs.turn == 3 and env.state.to_json()["turn"] == 3


def test_with_the_switch_every_step_counts():
    env = make_env(max_turns=2, count_every_step=True)
    env.step([call("search_corpus", ENGINE_QUERY)])
    obs = env.step([call("nope")])
    assert obs.done and obs.termination_reason == "max_turns"
    assert env.state.turns_used == env.state.turn == 2
    env = make_env(count_every_step=True)
    env.step([call("end_search")])
    assert env.state.turns_used == 1


def test_a_snapshot_from_before_the_count_reads_every_step_as_a_turn():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY)])
    env.step([call("nope")])
    old = env.state.to_json()
    del old["turns_used"]  # type: ignore[misc]
    assert HarnessState.from_json(old).turns_used == 2


# -- review_docs, fan_out_search and compression-off views (items 5-7) ----------------------


def test_review_docs_rereads_the_stored_text_under_the_card_header():
    env = make_env(review_max_chars=120)
    step1(env, "search_corpus", ENGINE_QUERY)
    env.step([call("verify", {"claim": "Ada Lovelace wrote notes", "doc_ids": ["Ada_Lovelace"]})])
    content = step1(env, "review_docs", {"doc_ids": ["Ada_Lovelace"]}).content
    header, text, *rest = content.splitlines()
    assert header.startswith('- Ada_Lovelace (seen t1; via "Analytical Engine')
    assert "curated fair" in header
    ada = next(d for d in DOCS if d.doc_id == "Ada_Lovelace")
    assert text.strip().startswith(ada.text[:100]) and len(text.strip()) <= 120
    assert any(line.strip().startswith('verified "Ada Lovelace wrote notes"') for line in rest)


def test_review_docs_shows_the_memory_card_under_its_switch():
    env = make_env(review_docs_text=False)
    step1(env, "search_corpus", ENGINE_QUERY)
    snippet = env.state.memory["Ada_Lovelace"].snippet
    content = step1(env, "review_docs", {"doc_ids": ["Ada_Lovelace"]}).content
    assert content.splitlines()[1].strip() == snippet


def test_fan_out_shows_ten_hits_per_query_by_default():
    env = make_env(auto_seed_count=0)
    step1(env, "fan_out_search", {"queries": ["Charles Babbage engine computer London"]})
    assert len(env.state.searches[0].hit_ids) == 10


def test_without_compression_hits_show_the_raw_text_up_to_2048_characters():
    long_doc = Document(
        "Long", "Long", " ".join(f"Sentence {i} about engines." for i in range(200))
    )
    env = make_env(Ablation().without("compression"), retriever=FakeRetriever([*DOCS, long_doc]))
    content = step1(env, "search_corpus", {"query": "Sentence about engines"}).content
    line = next(x for x in content.splitlines() if x.startswith("- Long"))
    view = line.split(": ", 1)[1]
    assert view.startswith("Sentence 0 about engines. Sentence 1") and len(view) <= 2048
    assert len(view) > 2000  # cut near the cap, not at a short snippet
    short = step1(env, "search_corpus", {"query": "Grace Hopper COBOL"}).content
    hopper = next(d for d in DOCS if d.doc_id == "Grace_Hopper")
    assert hopper.text in short  # a short document is shown whole
