"""grep_corpus: pattern validation and the bounds on one scan."""

from __future__ import annotations

import pytest

from harness_app.harness.grep import PatternError, compile_pattern, scan
from harness_app.harness.types import Document
from tests.harness.fakes import DOCS, call, make_env


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("", "empty"),
        ("(unclosed", "invalid regular expression"),
        ("(a+)+b", "nested quantifiers"),
        ("(\\w*x)*", "nested quantifiers"),
        ("(ab{2,})+", "nested quantifiers"),
        ("(a)\\1", "backreferences"),
        ("x*", "matches the empty string"),
        ("a" * 201, "at most 200"),
    ],
)
def test_rejected_patterns_say_why(pattern, reason):
    with pytest.raises(PatternError, match=reason):
        compile_pattern(pattern)


def test_matching_is_case_sensitive_unless_the_pattern_says_otherwise():
    assert scan(DOCS, compile_pattern("lucasian chair")).hits == []
    outcome = scan(DOCS, compile_pattern("(?i)lucasian chair"))
    assert [h.doc.doc_id for h in outcome.hits] == ["Charles_Babbage"]
    assert "Lucasian Chair of Mathematics" in outcome.hits[0].context
    assert outcome.stopped == "" and outcome.scanned_docs == len(DOCS)


def test_scan_stops_at_max_hits():
    outcome = scan(DOCS, compile_pattern("engine"), max_hits=2)
    assert len(outcome.hits) == 2 and outcome.stopped == "hits"


def test_scan_stops_at_the_character_cap_between_documents():
    outcome = scan(DOCS, compile_pattern("zebra"), max_scan_chars=500)
    assert outcome.stopped == "chars" and outcome.scanned_docs < len(DOCS)


def test_scan_stops_at_the_deadline_between_documents():
    endless = (Document(str(i), "", "nothing here") for i in range(10**9))
    outcome = scan(endless, compile_pattern("zebra"), time_limit_s=0.01)
    assert outcome.stopped == "time" and outcome.scanned_docs > 0


def test_each_document_is_searched_only_up_to_doc_chars():
    doc = Document("far", "", "x" * 1000 + " needle")
    assert scan([doc], compile_pattern("needle"), doc_chars=500).hits == []
    assert len(scan([doc], compile_pattern("needle"), doc_chars=2000).hits) == 1


def test_env_grep_registers_new_hits_and_says_how_far_it_scanned():
    env = make_env()
    obs = env.step([call("grep_corpus", {"pattern": "punched cards?"})])
    result = obs.tool_results[0]
    assert result.ok and "scanned" in result.content
    assert (
        "Punched_card" in env.state.memory
        and env.state.pool["Punched_card"].source == "grep_corpus"
    )
    assert env.state.searches[-1].tool == "grep_corpus"
