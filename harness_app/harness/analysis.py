"""The query-independent analysis of a document, computed on first need or read from an index.

Every mechanism that looks inside a shown document needs something that depends on the
document alone: compression its sentences and their BM25 weights, verification its
sentences' terms, dedup its MinHash fingerprint, the evidence graph its entities. Computed
at first sight that is about 0.3 ms a document, which is most of a search step when the
documents are new to the process (see docs/harness.md, Performance). So the corpus index
computes it once, when it is built, and stores it beside the postings
(retrieval/analysis_store.py); a worker then only reads it.

The harness asks the retriever: a retriever with a `document_analysis(doc)` method may
return a `DocAnalysis` for a document it served (or None); otherwise, and for None, the
harness uses `ComputedAnalysis`, which computes each part on first need and caches it per
process, keyed by document content (compress.py, dedup.py, graph.py). Both give the same
results to the bit; tests/harness/test_analysis.py checks it.

`ANALYSIS_VERSION` names what a stored analysis was computed with. Bump it whenever
sentence splitting, the sentence weights, the fingerprint or entity extraction change what
they produce, so that indexes built before are rebuilt rather than trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from harness_app.harness.compress import (
    SentenceView,
    SentenceWeights,
    compress,
    sentence_view,
    weights_of,
    with_title_fallback,
)
from harness_app.harness.dedup import Fingerprint, fingerprint
from harness_app.harness.graph import Mention, extract_entities
from harness_app.harness.text import ANALYZER_VERSION, analyze, split_sentences
from harness_app.harness.types import Document

ANALYSIS_VERSION = f"doc-analysis-1|{ANALYZER_VERSION}"


class DocAnalysis(Protocol):
    """What the mechanisms need of one document; every method depends on it alone."""

    def compressed(self, query: str, k: int, sentence_chars: int) -> str:
        """compress.compress(doc, query, k, sentence_chars)."""
        ...

    def sentence_view(self) -> SentenceView:
        """Sentences and the terms each contains (verification)."""
        ...

    def fingerprint(self) -> Fingerprint:
        """dedup.fingerprint of the text (of the title when the text is empty)."""
        ...

    def entities(self) -> tuple[Mention, ...]:
        """graph.extract_entities(doc)."""
        ...


AnalysisProvider = Callable[[Document], DocAnalysis]


class ComputedAnalysis:
    """Computes each part on first need, through the per-process caches."""

    __slots__ = ("doc",)

    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def compressed(self, query: str, k: int, sentence_chars: int) -> str:
        return compress(self.doc, query, k, sentence_chars)

    def sentence_view(self) -> SentenceView:
        return sentence_view(self.doc)

    def fingerprint(self) -> Fingerprint:
        return fingerprint(fingerprint_text(self.doc))

    def entities(self) -> tuple[Mention, ...]:
        return extract_entities(self.doc)


def analysis_provider(retriever: object) -> AnalysisProvider:
    """The function that gives a document's analysis: the retriever's, else computed."""
    stored = getattr(retriever, "document_analysis", None)
    if stored is None:
        return ComputedAnalysis

    def provide(doc: Document) -> DocAnalysis:
        found: DocAnalysis | None = stored(doc)
        return ComputedAnalysis(doc) if found is None else found

    return provide


def fingerprint_text(doc: Document) -> str:
    """What dedup fingerprints: the text, or the title of a document without text."""
    return doc.text or doc.title


# --- what an index stores (computed without touching the per-process caches) ----------


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each of split_sentences(text) in `text`, in order.

    Each sentence is a stripped piece between separators, so between the end of one and
    the start of the next there is only whitespace: searching from the previous end finds
    the sentence where it is.
    """
    sentences = split_sentences(text)
    spans = []
    cursor = 0
    for sentence in sentences:
        start = text.index(sentence, cursor)
        spans.append((start, start + len(sentence)))
        cursor = start + len(sentence)
    return spans


def sentence_weights_uncached(doc: Document) -> SentenceWeights:
    sentences = with_title_fallback(split_sentences(doc.text), doc.title)
    terms = [analyze(s) for s in sentences]
    return weights_of(terms)


def fingerprint_uncached(doc: Document) -> Fingerprint:
    return fingerprint.__wrapped__(fingerprint_text(doc))


def entities_uncached(doc: Document) -> tuple[Mention, ...]:
    return extract_entities.__wrapped__(doc)
