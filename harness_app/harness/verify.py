"""Structured verification of a claim against documents.

A `Verifier` turns (claim, document) into a `Verdict`; the harness stores one
`VerificationRecord` per pair. The default `LexicalVerifier` needs no model:

- claim terms = the analysed (stop-worded, stemmed) terms of the claim, as a set;
- sentence coverage = the share of claim terms found in one sentence (title counts as a
  sentence), best sentence wins; document coverage = the share found anywhere;
- score = 0.6 * best sentence coverage + 0.4 * document coverage, in [0, 1];
- supported when score >= 0.65, unsupported when score < 0.35, unclear in between;
- evidence = up to two sentences with the highest coverage (above zero), best first.

It measures whether the document *states the claim's content*, so "unsupported" means
"not found here", never "refuted", and negation or swapped roles go unnoticed. Plug an LLM
verifier in through `SearchHarness(verifier=...)` when that matters
(`harness_app/harness/llm/verifier.py`, Harness-1's yes/no judge). A verifier that depends on
an outside service raises `types.ServiceError` when the service fails; the episode ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from harness_app.harness.compress import SentenceView, clip, sentence_view
from harness_app.harness.text import analyze
from harness_app.harness.types import Document

SUPPORTED_AT = 0.65
UNSUPPORTED_BELOW = 0.35
EVIDENCE_SENTENCES = 2
EVIDENCE_CHARS = 220


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: str  # supported | unsupported | unclear
    score: float
    evidence: tuple[str, ...]
    # A model verifier's reasons in its own words; the lexical verifier gives none.
    rationale: str = ""


@runtime_checkable
class Verifier(Protocol):
    def verify(self, claim: str, document: Document) -> Verdict: ...


class LexicalVerifier:
    """Term-coverage verifier; see the module docstring for the rule and its limits."""

    def __init__(
        self,
        supported_at: float = SUPPORTED_AT,
        unsupported_below: float = UNSUPPORTED_BELOW,
    ) -> None:
        self.supported_at = supported_at
        self.unsupported_below = unsupported_below

    def verify(self, claim: str, document: Document, view: SentenceView | None = None) -> Verdict:
        """`view`: the document's sentence view when already at hand (e.g. read from the
        index); only which terms each sentence contains matters, not their order."""
        claim_terms = set(analyze(claim))
        if not claim_terms:
            return Verdict("unclear", 0.0, ())
        view = view or sentence_view(document)
        title_terms = set(analyze(document.title))
        coverage = [len(claim_terms.intersection(t)) / len(claim_terms) for t in view.terms]
        seen = title_terms.union(*view.terms) if view.terms else title_terms
        doc_coverage = len(claim_terms & seen) / len(claim_terms)
        best = max([len(claim_terms & title_terms) / len(claim_terms), *coverage])
        score = round(0.6 * best + 0.4 * doc_coverage, 3)
        order = sorted(range(len(coverage)), key=lambda i: (-coverage[i], i))
        evidence = tuple(
            clip(view.sentences[i], EVIDENCE_CHARS)
            for i in order[:EVIDENCE_SENTENCES]
            if coverage[i] > 0
        )
        return Verdict(self._label(score), score, evidence)

    def _label(self, score: float) -> str:
        if score >= self.supported_at:
            return "supported"
        if score < self.unsupported_below:
            return "unsupported"
        return "unclear"
