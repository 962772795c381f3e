"""Hop-by-hop bridging: the helpers, the compositional fixture, and the baseline's margin.

The margin test is what a user of the baseline notices: on held-out 2-4-hop questions
whose answer documents share few words with the question, the curated set beats one BM25
search at the same number of documents by at least 0.08 recall (issue 17's goal). It is
computed here from a real run on `tests/fixtures/compositional` (split `test`; the
baseline's settings were tuned on split `dev` only).
"""

from __future__ import annotations

import filecmp
import statistics
from pathlib import Path

import pytest

from harness_app.harness.ablation import Ablation
from harness_app.harness.beir import beir_queries
from harness_app.harness.condition_eval import evaluate_condition
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.grep import compile_pattern, scan
from harness_app.harness.policies import POLICY_FACTORIES
from harness_app.harness.policies.baseline import BaselineConfig, BaselinePolicy
from harness_app.harness.policies.bridging import (
    bridge_candidates,
    mention_cue,
    question_spans,
    title_lookup_patterns,
    unseen_question_entities,
)
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.runner import run_episode
from harness_app.harness.text import analyze
from harness_app.harness.types import Document, QuerySpec, ToolCall
from tests.fixtures.compositional import generate

FIXTURE = Path(generate.__file__).resolve().parent

# -- the helpers -------------------------------------------------------------------------

DOCS = (
    Document(
        "Lamp",
        "The Copper Lamp",
        "The Copper Lamp is a novel. It was published by Vell Press in a small run. "
        "Its author, Ada Korrin, drafted it in winter. The story is set in Tamsford Cove.",
    ),
    Document("Vell_Press", "Vell Press", "Vell Press was founded by Oren Dask."),
    Document("Korrin", "Ada Korrin", "Ada Korrin was raised in Halvard Crossing."),
    Document("Korrin_film", "Ada Korrin (film)", "A film about a writer."),
    Document("Mentions", "Printing notes", "Notes name Vell Press and Ada Korrin in passing."),
)
QUESTION = 'Who founded the firm that published the novel "The Copper Lamp"?'


@pytest.fixture(scope="module")
def small_index(tmp_path_factory: pytest.TempPathFactory) -> BM25Index:
    return BM25Index.build(DOCS, tmp_path_factory.mktemp("bridging") / "index")


def _searched(index: BM25Index):
    env = SearchHarness(index, config=HarnessConfig(search_k=1))
    env.reset(QuerySpec("q", QUESTION))
    env.step([ToolCall("search_corpus", {"query": QUESTION}, "c0")])
    return env.state


def test_mention_cue_counts_question_terms_in_the_naming_sentence():
    terms = set(analyze(QUESTION))
    assert mention_cue(DOCS[0].text, "Vell Press", terms) >= 1  # "published"
    assert mention_cue(DOCS[0].text, "Ada Korrin", terms) == 0
    assert mention_cue(DOCS[0].text, "Nobody Here", terms) == 0


def test_candidates_rank_the_cued_link_first_and_skip_followed_ones(small_index):
    state = _searched(small_index)
    assert list(state.memory) == ["Lamp"]
    texts = {"Lamp": DOCS[0].text}
    found = bridge_candidates(state, QUESTION, [("Lamp", 1.0)], texts, followed=())
    keys = [c.key for c in found]
    assert keys[0] == "vell press"  # named in the sentence that says "published"
    assert {"ada korrin", "tamsford cove"} <= set(keys)
    assert "copper lamp" not in keys  # the document's own title is no bridge
    assert sum(c.score for c in found) == pytest.approx(1.0)  # a share of the doc's weight
    again = bridge_candidates(state, QUESTION, [("Lamp", 1.0)], texts, followed={"vell press"})
    assert "vell press" not in [c.key for c in again]


def test_title_lookup_finds_only_the_articles_titled_after_the_entities(small_index):
    patterns = title_lookup_patterns(["Vell Press", "Ada Korrin", "The Copper Lamp"], 200)
    assert len(patterns) == 1
    pattern, labels = patterns[0]
    assert labels == ["Vell Press", "Ada Korrin", "Copper Lamp"]
    hits = scan(small_index.iter_documents(), compile_pattern(pattern, 200)).hits
    # Titles with or without a disambiguator and a leading article; never mere mentions.
    assert sorted(h.doc.doc_id for h in hits) == ["Korrin", "Korrin_film", "Lamp", "Vell_Press"]


def test_title_lookups_are_split_to_fit_the_pattern_limit():
    labels = [f"Entity Number {i}" for i in range(12)]
    patterns = title_lookup_patterns(labels, 80)
    assert len(patterns) > 1
    assert all(len(p) <= 80 for p, _ in patterns)
    assert [label for _, group in patterns for label in group] == labels
    assert title_lookup_patterns(["x" * 300], 80) == []


def test_question_spans_name_both_subjects_of_a_comparison():
    spans = question_spans("Which band formed earlier, Echosmith or Goo Goo Dolls?")
    assert spans == ["Echosmith", "Goo Goo Dolls"]
    assert "For Against" in question_spans("Are Local H and For Against both from Ohio?")


def test_question_entities_already_titled_are_not_looked_up_again(small_index):
    state = _searched(small_index)
    keys = [c.key for c in unseen_question_entities(state, QUESTION)]
    assert "copper lamp" not in keys  # its article is the shown hit


def test_baseline_walks_two_hops_to_the_founder(small_index):
    env = SearchHarness(small_index, config=HarnessConfig(search_k=1))
    tools = [s["function"]["name"] for s in env.tool_schemas()]
    question = QuerySpec("q", QUESTION, qrels={"Lamp": 1, "Vell_Press": 2})
    result = run_episode(env, BaselinePolicy(tools=tools), question)
    assert "Vell_Press" in result.curated_ids
    assert result.metrics.format_errors == 0
    greps = [s for s in env.state.searches if s.tool == "grep_corpus"]
    assert greps and "Mentions" not in env.state.shown  # lookups show articles only


def test_a_lookup_cut_short_by_the_grep_time_limit_is_scanned_once_more(small_index):
    # With no time at all every scan stops before the first document: the baseline scans
    # each pattern a second time, then carries on with what it has.
    env = SearchHarness(small_index, config=HarnessConfig(search_k=1, grep_time_limit_s=0.0))
    tools = [s["function"]["name"] for s in env.tool_schemas()]
    question = QuerySpec("q", QUESTION, qrels={"Lamp": 1, "Vell_Press": 2})
    result = run_episode(env, BaselinePolicy(tools=tools), question)
    patterns = [s.query for s in env.state.searches if s.tool == "grep_corpus"]
    assert patterns and all(patterns.count(p) == 2 for p in patterns)
    assert result.termination_reason == "end_search"
    assert result.metrics.format_errors == 0
    assert "Lamp" in result.curated_ids


# -- the compositional fixture -----------------------------------------------------------


def test_committed_fixture_is_what_the_generator_writes(tmp_path):
    generate.write(tmp_path)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/dev.tsv", "qrels/test.tsv"):
        assert filecmp.cmp(tmp_path / name, FIXTURE / name, shallow=False), name


def test_each_hop_is_reachable_only_through_the_previous_one():
    corpus, questions = generate.build()
    docs = {row["_id"]: row for row in corpus}
    assert {len(q.chain) for q in questions} == {2, 3, 4}
    for q in questions:
        titles = [docs[d]["title"] for d in q.chain]
        for j, doc_id in enumerate(q.chain):
            text = docs[doc_id]["text"]
            others = [t for i, t in enumerate(titles) if i not in (j, j + 1)]
            assert not any(t in text for t in others), (q.query_id, doc_id)
            if j + 1 < len(titles):
                assert titles[j + 1] in text
                assert titles[j + 1] not in q.text


def test_answer_documents_share_few_words_with_their_question():
    corpus, questions = generate.build()
    docs = {row["_id"]: row for row in corpus}
    shares = []
    for q in questions:
        asked = set(analyze(q.text))
        answer = docs[q.chain[-1]]
        shared = asked & set(analyze(f"{answer['title']} {answer['text']}"))
        assert len(shared) <= 3, (q.query_id, shared)
        shares.append(len(shared) / len(asked))
    assert statistics.fmean(shares) < 0.15


def test_dev_and_held_out_splits_do_not_share_questions():
    dev = {q.query_id for q in beir_queries(FIXTURE, "dev")}
    held_out = {q.query_id for q in beir_queries(FIXTURE, "test")}
    assert len(dev) == len(held_out) == 45
    assert not dev & held_out


# -- the margin over BM25 on the held-out split --------------------------------------------


@pytest.fixture(scope="module")
def fixture_index(tmp_path_factory: pytest.TempPathFactory) -> BM25Index:
    corpus, _ = generate.build()
    docs = [Document(r["_id"], r["title"], r["text"]) for r in corpus]
    return BM25Index.build(docs, tmp_path_factory.mktemp("compositional") / "index")


def _held_out_rows(index: BM25Index, config: BaselineConfig | None = None) -> list[dict]:
    POLICY_FACTORIES["_bridging_test"] = lambda tools, seed: BaselinePolicy(config, tools=tools)
    try:
        return list(
            evaluate_condition(
                index,
                beir_queries(FIXTURE, "test"),
                policy_name="_bridging_test",
                ablation=Ablation(),
                config=HarnessConfig(),
            )
        )
    finally:
        del POLICY_FACTORIES["_bridging_test"]


def _mean(rows: list[dict], key: str) -> float:
    return statistics.fmean(row[key] for row in rows)


def test_baseline_beats_bm25_on_held_out_compositional_questions(fixture_index):
    rows = _held_out_rows(fixture_index)
    margin = _mean(rows, "curated_recall") - _mean(rows, "bm25_recall_same_k")
    assert margin >= 0.08
    shown_margin = _mean(rows, "trajectory_recall") - _mean(rows, "bm25_recall_same_shown")
    assert shown_margin >= 0.05
    assert _mean(rows, "format_errors") == 0


def test_walking_further_reaches_answers_one_hop_cannot(fixture_index):
    walk = _held_out_rows(fixture_index)
    one_hop = _held_out_rows(fixture_index, BaselineConfig(bridge_rounds=1))
    assert _mean(walk, "trajectory_final_answer_recall") > _mean(
        one_hop, "trajectory_final_answer_recall"
    )
