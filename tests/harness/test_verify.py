"""Structured verification: lexical verdicts and a pluggable Verifier."""

from __future__ import annotations

from harness_app.harness.env import SearchHarness
from harness_app.harness.types import Document
from harness_app.harness.verify import LexicalVerifier, Verdict, Verifier
from tests.harness.fakes import DOCS, QUESTION, FakeRetriever, call

ADA = DOCS[0]


def test_claim_stated_in_one_sentence_is_supported_with_that_sentence_as_evidence():
    verdict = LexicalVerifier().verify("Ada Lovelace was born in London in 1815", ADA)
    assert verdict.verdict == "supported" and verdict.score >= 0.65
    assert verdict.evidence[0].startswith("Ada Lovelace was an English mathematician")


def test_unrelated_claim_is_unsupported_and_partial_overlap_is_unclear():
    verifier = LexicalVerifier()
    assert verifier.verify("Grace Hopper designed COBOL compilers", ADA).verdict == "unsupported"
    partial = verifier.verify("Ada Lovelace was born in Paris in 1790 to a baker", ADA)
    assert partial.verdict == "unclear"


def test_claim_without_content_words_is_unclear():
    assert LexicalVerifier().verify("it was the", ADA) == Verdict("unclear", 0.0, ())


class AlwaysSupported:
    def verify(self, claim: str, document: Document) -> Verdict:
        return Verdict("supported", 1.0, (document.title,))


def test_a_plugged_verifier_is_used_and_records_are_structured():
    assert isinstance(AlwaysSupported(), Verifier)
    env = SearchHarness(FakeRetriever(), verifier=AlwaysSupported())
    env.reset(QUESTION)
    env.step([call("read_document", {"doc_id": "Grace_Hopper"})])
    obs = env.step([call("verify", {"claim": "anything", "doc_ids": ["Grace_Hopper"]})])
    record = env.state.verifications[0]
    assert (record.turn, record.claim, record.doc_id, record.verdict) == (
        2,
        "anything",
        "Grace_Hopper",
        "supported",
    )
    assert record.evidence == ["Grace Hopper"]
    assert 'VERIFIED "anything": Grace_Hopper supported 1.00' in obs.working_memory
