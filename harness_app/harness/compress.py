"""BM25 sentence compression of search hits, and the leading snippet used without it.

Compression keeps the `k` sentences (default 4) that rank-bm25's BM25Okapi scores highest
against the query, ties going to the earlier sentence, and prints them in their original
order; gaps between kept sentences are marked with " … " so the model knows text was
dropped. A document with `k` sentences or fewer is shown whole (each sentence still capped).

Sentence splitting, term analysis and the per-document BM25Okapi depend only on the
document, so they are cached per document content (each computed only when first needed)
and shared by every episode in the process, whatever its ablation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rank_bm25 import BM25Okapi

from harness_app.harness.text import analyze, split_sentences
from harness_app.harness.types import Document

GAP = " … "


@dataclass(frozen=True, slots=True)
class SentenceView:
    """A document split into sentences, with each sentence's analysed terms."""

    sentences: tuple[str, ...]
    terms: tuple[tuple[str, ...], ...]


def sentences_of(doc: Document) -> tuple[str, ...]:
    return _sentences(doc.text, doc.title)


@lru_cache(maxsize=16_384)
def _sentences(text: str, title: str) -> tuple[str, ...]:
    return tuple(split_sentences(text)) or ((title,) if title else ())


@lru_cache(maxsize=8192)
def sentence_view(doc: Document) -> SentenceView:
    """Sentences and their terms; analysis is the costly part, so only ranking and
    verification ask for it (a short document is shown whole without it)."""
    sentences = sentences_of(doc)
    return SentenceView(sentences, tuple(tuple(analyze(s)) for s in sentences))


@lru_cache(maxsize=8192)
def sentence_bm25(doc: Document) -> BM25Okapi | None:
    """rank-bm25 over the document's sentences; None when no sentence has a term."""
    terms = sentence_view(doc).terms
    return BM25Okapi([list(t) for t in terms]) if any(terms) else None


def top_sentence_indices(doc: Document, query: str, k: int) -> list[int]:
    """Indices of the k best sentences for `query`, ascending (original order)."""
    n = len(sentences_of(doc))
    if n <= k:
        return list(range(n))
    bm25 = sentence_bm25(doc)
    if bm25 is None:
        return list(range(k))
    # Terms absent from every sentence add exactly zero in rank-bm25, so skipping them
    # changes no score and saves a numpy pass per term.
    query_terms = [t for t in analyze(query) if t in bm25.idf]
    if not query_terms:
        return list(range(k))
    scores = bm25.get_scores(query_terms)
    ranked = sorted(range(n), key=lambda i: (-float(scores[i]), i))
    return sorted(ranked[:k])


@lru_cache(maxsize=16_384)
def compress(doc: Document, query: str, k: int = 4, sentence_chars: int = 300) -> str:
    """The top-k sentences for `query`, in original order, gaps marked.

    Cached too: the N samples of one GRPO group mostly issue the same first queries.
    """
    sentences = sentences_of(doc)
    parts: list[str] = []
    previous = -1
    for index in top_sentence_indices(doc, query, k):
        if parts and index != previous + 1:
            parts.append(GAP)
        elif parts:
            parts.append(" ")
        parts.append(clip(sentences[index], sentence_chars))
        previous = index
    return "".join(parts)


def leading_snippet(doc: Document, chars: int) -> str:
    """The fixed-length opening of the text, cut at a word boundary."""
    return clip(doc.text or doc.title, chars)


def clip(text: str, chars: int) -> str:
    """`text` on one line, cut to at most `chars` characters at a word boundary, with "…"."""
    if len(text) <= chars and "\n" not in text and "  " not in text:
        return text  # the common case on the hot path: nothing to normalise or cut
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    cut = text[: max(chars - 1, 1)]
    space = cut.rfind(" ")
    if space > chars // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"
