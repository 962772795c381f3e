"""Near-duplicate suppression: MinHash/LSH candidates confirmed by exact shingle Jaccard."""

from __future__ import annotations

from typing import Any

from harness_app.harness.dedup import DedupIndex, fingerprint, jaccard
from tests.harness.fakes import DOCS, call, make_env

ENGINE, ENGINE_COPY = DOCS[2], DOCS[3]
LONG = " ".join(f"word{i} appears in sentence number {i} of a long report." for i in range(40))


def test_near_duplicate_of_a_shown_doc_is_found_and_distinct_docs_are_not():
    index = DedupIndex(0.85)
    index.add(ENGINE.doc_id, ENGINE.text)
    assert index.near_duplicate_of(ENGINE_COPY.text) == ENGINE.doc_id
    assert all(
        index.near_duplicate_of(d.text) is None for d in DOCS if d not in (ENGINE, ENGINE_COPY)
    )


def test_threshold_is_on_exact_jaccard():
    edited = LONG.replace("word3 ", "changed ").replace("word9 ", "changed ")
    similarity = jaccard(fingerprint(LONG).shingles, fingerprint(edited).shingles)
    assert 0.85 <= similarity < 1.0
    loose, strict = DedupIndex(0.85), DedupIndex(min(similarity + 0.01, 1.0))
    loose.add("a", LONG)
    strict.add("a", LONG)
    assert loose.near_duplicate_of(edited) == "a"
    assert strict.near_duplicate_of(edited) is None


def test_case_and_punctuation_do_not_hide_a_duplicate():
    index = DedupIndex()
    index.add("a", LONG)
    assert index.near_duplicate_of(LONG.upper().replace(".", " !")) == "a"


def test_short_stubs_are_never_duplicates():
    index = DedupIndex()
    index.add("a", "See also.")
    assert index.near_duplicate_of("See also.") is None


def test_env_hides_the_near_duplicate_records_it_and_mentions_it():
    env = make_env(max_format_error_turns=9)
    obs = env.step([call("search_corpus", {"query": "Analytical Engine mill store punched cards"})])
    state = env.state
    assert state.suppressed == {ENGINE_COPY.doc_id: ENGINE.doc_id}
    # As in Harness-1, a hidden near-duplicate never enters the pool: its text was not
    # shown, so it is not in T and does not count toward trajectory recall.
    assert ENGINE_COPY.doc_id not in state.memory and ENGINE_COPY.doc_id not in state.shown_ids
    assert "near-duplicates hidden: Analytical_Engine_copy≈Analytical_Engine" in obs.text
    assert state.searches[0].suppressed == [ENGINE_COPY.doc_id]
    assert "1 near-dups hidden" in obs.working_memory
    # Not returned again by a later search, even though it is not "shown".
    again = env.step([call("search_corpus", {"query": "Analytical Engine mill store"})])
    assert ENGINE_COPY.doc_id not in again.text
    # Curating, verifying or reviewing it says why it cannot, and names the kept doc.
    refused: list[tuple[str, dict[str, Any]]] = [
        ("curate", {"add_ids": [ENGINE_COPY.doc_id]}),
        ("verify", {"claim": "the mill", "doc_ids": [ENGINE_COPY.doc_id]}),
        ("review_docs", {"doc_ids": [ENGINE_COPY.doc_id]}),
    ]
    for name, arguments in refused:
        result = env.step([call(name, arguments)]).tool_results[0]
        assert not result.ok
        assert "Analytical_Engine_copy (near-duplicate of Analytical_Engine)" in result.error
    # Reading it shows its text: from then on it is an ordinary shown document.
    assert env.step([call("read_document", {"doc_id": ENGINE_COPY.doc_id})]).tool_results[0].ok
    assert env.step([call("curate", {"add_ids": [ENGINE_COPY.doc_id]})]).tool_results[0].ok


def test_with_the_switch_hidden_near_duplicates_count_as_shown():
    env = make_env(hidden_duplicates_count_as_shown=True)
    env.step([call("search_corpus", {"query": "Analytical Engine mill store punched cards"})])
    state = env.state
    assert ENGINE_COPY.doc_id not in state.memory and ENGINE_COPY.doc_id in state.shown_ids
    # It can be reviewed (pointing at the kept doc) and curated without being read.
    review = env.step([call("review_docs", {"doc_ids": [ENGINE_COPY.doc_id]})]).tool_results[0]
    assert review.ok and "near-duplicate of Analytical_Engine" in review.content
    assert env.step([call("curate", {"add_ids": [ENGINE_COPY.doc_id]})]).tool_results[0].ok
