"""BM25 sentence compression of search hits, and the leading snippet used without it.

Compression keeps the `k` sentences (default 4) that rank-bm25's BM25Okapi scores highest
against the query, ties going to the earlier sentence, and prints them in their original
order; gaps between kept sentences are marked with " … " so the model knows text was
dropped. A document with `k` sentences or fewer is shown whole (each sentence still capped).

Sentence splitting, term analysis and the per-document BM25 weights depend only on the
document. They are either precomputed with the corpus index (see analysis.py) or computed
here when first needed and cached per document content, shared by every episode in the
process whatever its ablation.

`SentenceWeights` holds, for each term of the document, the BM25Okapi contribution it adds
to each sentence containing it: exactly the number `BM25Okapi.get_scores([term])` gives
that sentence. A query's sentence scores are those contributions summed in query-term order
(repeats included), which is what `get_scores(query)` adds, so the ranking is rank-bm25's
to the bit, without building a BM25Okapi per document at query time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from rank_bm25 import BM25Okapi

from harness_app.harness.text import analyze, split_sentences
from harness_app.harness.types import Document

GAP = " … "


@dataclass(frozen=True, slots=True)
class SentenceView:
    """A document split into sentences, with each sentence's analysed terms.

    Verification only asks which terms a sentence contains; a view read from an index
    lists each sentence's distinct terms rather than every occurrence.
    """

    sentences: tuple[str, ...]
    terms: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class SentenceWeights:
    """Term -> (sentence, weight) pairs in CSR form; see the module docstring.

    `rows` maps a term to its row; row r's pairs are positions indptr[r]:indptr[r + 1] of
    `sentences` and `weights`. Empty `rows`: no sentence has a term.
    """

    rows: dict[str, int]
    indptr: Sequence[int]
    sentences: Sequence[int]
    weights: Sequence[float]


def sentences_of(doc: Document) -> tuple[str, ...]:
    return _sentences(doc.text, doc.title)


def with_title_fallback(sentences: Sequence[str], title: str) -> tuple[str, ...]:
    """A text without sentences is represented by its title (if any)."""
    return tuple(sentences) or ((title,) if title else ())


@lru_cache(maxsize=16_384)
def _sentences(text: str, title: str) -> tuple[str, ...]:
    return with_title_fallback(split_sentences(text), title)


@lru_cache(maxsize=8192)
def sentence_view(doc: Document) -> SentenceView:
    """Sentences and their terms; analysis is the costly part, so only ranking and
    verification ask for it (a short document is shown whole without it)."""
    sentences = sentences_of(doc)
    return SentenceView(sentences, tuple(tuple(analyze(s)) for s in sentences))


@lru_cache(maxsize=8192)
def sentence_weights(doc: Document) -> SentenceWeights:
    return weights_of(sentence_view(doc).terms)


def weights_of(terms: Sequence[Sequence[str]]) -> SentenceWeights:
    """The BM25Okapi weights of each (term, sentence) pair, terms in first-seen order."""
    if not any(terms):
        return SentenceWeights({}, [0], [], [])
    bm25 = BM25Okapi([list(t) for t in terms])
    rows: dict[str, int] = {}
    for sentence in terms:
        for term in sentence:
            rows.setdefault(term, len(rows))
    tf = np.zeros((len(rows), len(terms)), dtype=np.int64)
    for j, freqs in enumerate(bm25.doc_freqs):
        for term, count in freqs.items():
            tf[rows[term], j] = count
    idf = np.array([[bm25.idf.get(t) or 0] for t in rows], dtype=np.float64)
    # rank-bm25's get_scores expression, operation for operation, for all terms at once.
    doc_len = np.array(bm25.doc_len)
    k1, b = bm25.k1, bm25.b
    weights = idf * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / bm25.avgdl)))
    row_ids, sentence_ids = np.nonzero(tf)  # row-major: grouped by term, sentences ascending
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_ids, minlength=len(rows)), out=indptr[1:])
    return SentenceWeights(
        rows,
        indptr.tolist(),
        sentence_ids.tolist(),
        weights[row_ids, sentence_ids].tolist(),
    )


def top_sentence_indices(doc: Document, query: str, k: int) -> list[int]:
    """Indices of the k best sentences for `query`, ascending (original order)."""
    return rank_sentences(len(sentences_of(doc)), lambda: sentence_weights(doc), query, k)


def rank_sentences(
    n: int, weights: Callable[[], SentenceWeights], query: str, k: int
) -> list[int]:
    """The k best of `n` sentences, ascending; `weights` is only asked for when n > k."""
    if n <= k:
        return list(range(n))
    table = weights()
    # Terms absent from every sentence add exactly zero in rank-bm25, so skipping them
    # changes no score.
    rows = [r for r in map(table.rows.get, analyze(query)) if r is not None]
    if not rows:
        return list(range(k))
    scores = [0.0] * n
    indptr, sentences, weights_ = table.indptr, table.sentences, table.weights
    for row in rows:
        for j in range(indptr[row], indptr[row + 1]):
            scores[sentences[j]] += weights_[j]
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    return sorted(ranked[:k])


@lru_cache(maxsize=16_384)
def compress(doc: Document, query: str, k: int = 4, sentence_chars: int = 300) -> str:
    """The top-k sentences for `query`, in original order, gaps marked.

    Cached too: the N samples of one GRPO group mostly issue the same first queries.
    """
    sentences = sentences_of(doc)
    return render(sentences, top_sentence_indices(doc, query, k), sentence_chars)


def render(sentences: Sequence[str], indices: list[int], sentence_chars: int) -> str:
    """The chosen sentences, each clipped, joined by a space or, across a gap, GAP."""
    parts: list[str] = []
    previous = -1
    for index in indices:
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
