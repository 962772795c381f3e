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

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from harness_app.harness.text import analyze, split_sentences
from harness_app.harness.types import Document

GAP = " … "
# rank_bm25.BM25Okapi's defaults, which the sentence ranking has always used.
_K1, _B, _EPSILON = 1.5, 0.75, 0.25


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
    """BM25Okapi's weight of each (term, sentence) pair, terms in first-seen order.

    What `rank_bm25.BM25Okapi(terms)` computes (its defaults k1=1.5, b=0.75,
    epsilon=0.25), written out so that no BM25Okapi object is built per document: the same
    counts, the same idf with its floor (summed in the same order), and each weight its
    get_scores expression for one term and sentence, operation for operation. All float64,
    so the numbers are equal to the bit; tests/harness/test_analysis.py compares them.
    """
    if not any(terms):
        return SentenceWeights({}, [0], [], [])
    counts = [Counter(sentence) for sentence in terms]  # first-seen order, like rank-bm25
    containing: dict[str, int] = {}
    for freqs in counts:
        for term in freqs:
            containing[term] = containing.get(term, 0) + 1
    n = len(terms)
    avgdl = sum(len(sentence) for sentence in terms) / n
    idf: dict[str, float] = {}
    idf_sum = 0.0
    for term, df in containing.items():
        idf[term] = value = math.log(n - df + 0.5) - math.log(df + 0.5)
        idf_sum += value
    floor = _EPSILON * (idf_sum / len(idf))
    for term, value in idf.items():
        if value < 0:
            idf[term] = floor
    rows = {term: row for row, term in enumerate(containing)}
    pairs: list[list[tuple[int, float]]] = [[] for _ in rows]
    k1, b = _K1, _B
    for sentence, freqs in enumerate(counts):
        norm = k1 * (1 - b + b * len(terms[sentence]) / avgdl)
        for term, tf in freqs.items():
            pairs[rows[term]].append((sentence, (idf[term] or 0) * (tf * (k1 + 1) / (tf + norm))))
    indptr = [0]
    for row_pairs in pairs:
        indptr.append(indptr[-1] + len(row_pairs))
    flat = [pair for row_pairs in pairs for pair in row_pairs]
    return SentenceWeights(rows, indptr, [s for s, _ in flat], [w for _, w in flat])


def top_sentence_indices(doc: Document, query: str, k: int) -> list[int]:
    """Indices of the k best sentences for `query`, ascending (original order)."""
    return rank_sentences(len(sentences_of(doc)), lambda: sentence_weights(doc), query, k)


def rank_sentences(n: int, weights: Callable[[], SentenceWeights], query: str, k: int) -> list[int]:
    """The k best of `n` sentences, ascending; `weights` is only asked for when n > k."""
    if n <= k:
        return list(range(n))
    table = weights()
    # Terms absent from every sentence add exactly zero in rank-bm25, so skipping them
    # changes no score.
    rows = [r for r in map(table.rows.get, query_terms(query)) if r is not None]
    if not rows:
        return list(range(k))
    scores = [0.0] * n
    indptr, sentences, weights_ = table.indptr, table.sentences, table.weights
    for row in rows:
        for j in range(indptr[row], indptr[row + 1]):
            scores[sentences[j]] += weights_[j]
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    return sorted(ranked[:k])


@lru_cache(maxsize=1024)
def query_terms(query: str) -> tuple[str, ...]:
    """analyze(query), remembered: one search ranks the sentences of every hit with it."""
    return tuple(analyze(query))


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
