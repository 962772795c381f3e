"""Exact top-k BM25 with MaxScore pruning over term-major postings, in NumPy.

A document's score is the sum of its weights in the query's rows, and every weight of a
term is at most that term's largest weight (`postings.max`, stored at build time for the
index's k1 and b, as the weights themselves are). So once some score theta is known to be
reached by k documents, a document whose best possible total is below theta cannot be in
the top k:

1. Seed theta with exact scores: the documents where each query term weighs most
   (`postings.top`, a few per term, stored at build time) and every document of the
   rarest rows; theta is the k-th best of them.
2. Order the terms by their largest weight. The cheapest terms whose bounds add up to less
   than theta (less than `1 - _FLOOR_SHARE` of it, in fact) are "non-essential": a
   document holding only those cannot reach theta, so only documents in the other
   (essential) rows are candidates. Those rows are added up densely; the long rows of
   common terms, which cost the most, are never walked.
3. Each non-essential term then adds its weight to the surviving candidates by binary
   search in its row, most valuable term first; after each one, candidates whose partial
   score plus the bounds still to come fall below theta are dropped, and theta rises to
   the k-th best partial score.
4. The survivors are scored again from scratch, term by term in query order and in
   float32, which is exactly the arithmetic of the exhaustive path: the same documents
   get bit-identical scores, and ties are then broken by corpus position as before.

The comparisons with theta keep a relative slack (`_SLACK`) far wider than float32
rounding, so rounding can cost a little pruning but never a result.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
PositionArray = npt.NDArray[np.int32]
ScoreArray = npt.NDArray[np.float32]
# (first posting, end of postings, how often the term occurs in the query, term row)
Row = tuple[int, int, int, int]

# Relative safety margin on every bound comparison: float32 sums of a few dozen terms
# are off by at most ~1e-6 relative.
_SLACK = 1e-5
_LOW, _HIGH = 1.0 - _SLACK, 1.0 + _SLACK
# Share of theta left for the essential rows to reach. Making every possible term
# non-essential would leave a floor near zero, which nearly every document of the other
# rows passes; walking one more row costs less than looking all of those up.
_FLOOR_SHARE = 0.35
# A row shorter than this many times the positions looked up in it is spread densely.
_SPREAD_BELOW = 8
# Postings at least 1/16 of the documents: scan the dense buffer instead of gathering.
_DENSE_RATIO = 16
# Postings of the rarest query terms scored whole to seed theta.
_SEED_POSTINGS = 1024


class Postings:
    """The arrays a query reads (memory-mapped), grouped so they travel together."""

    def __init__(self, docs: Any, weights: Any, maxes: Any, top_indptr: Any, top_docs: Any):
        self.docs = docs
        self.weights = weights
        self.maxes = maxes
        self.top_indptr = top_indptr
        self.top_docs = top_docs


def lookup(postings: Postings, row: Row, positions: PositionArray, acc: ScoreArray) -> ScoreArray:
    """The row's weight (times its query count) for each of `positions`; 0 where absent.

    A binary search per position in a long row; a short one is spread into `acc` (the
    all-zero scratch, left all-zero) and read back, which costs less per posting.
    """
    start, end, count, _ = row
    docs = postings.docs[start:end]
    if end - start < _SPREAD_BELOW * len(positions):
        acc[docs] = postings.weights[start:end]
        weights: ScoreArray = acc[positions]
        acc[docs] = 0
    else:
        found = np.searchsorted(docs, positions)
        np.minimum(found, end - start - 1, out=found)
        weights = postings.weights[start:end][found]
        weights[docs[found] != positions] = 0
    return weights if count == 1 else weights * count


def exact_scores(
    postings: Postings, rows: list[Row], positions: PositionArray, acc: ScoreArray
) -> ScoreArray:
    """Scores of `positions`, summed in query order in float32 like the exhaustive path."""
    total = np.zeros(len(positions), dtype=np.float32)
    for row in rows:
        total += lookup(postings, row, positions, acc)
    return total


def kth_best(scores: ScoreArray, k: int) -> float:
    """The k-th largest score, or 0 when there are fewer than k."""
    if len(scores) < k:
        return 0.0
    return float(np.partition(scores, len(scores) - k)[len(scores) - k])


def seed_threshold(
    postings: Postings, rows: list[Row], k: int, excluded: IntArray | None, acc: ScoreArray
) -> float:
    """A score that at least k documents reach: the k-th best of some exact scores.

    The documents scored are those where each query term weighs most, and every document
    of the rarest terms (whole rows, up to `_SEED_POSTINGS`): the best matches usually
    hold a rare query term, so theta starts close to the final k-th score.
    """
    top_indptr, top_docs = postings.top_indptr, postings.top_docs
    parts = [top_docs[top_indptr[term] : top_indptr[term + 1]] for *_, term in rows]
    budget = _SEED_POSTINGS
    for start, end, _, _ in sorted(rows, key=lambda row: row[1] - row[0]):
        budget -= end - start
        if budget < 0:
            break
        parts.append(postings.docs[start:end])
    seeds = sorted_unique(np.concatenate(parts))
    if excluded is not None and len(excluded):
        seeds = seeds[~np.isin(seeds, excluded)]
    if len(seeds) < k:
        return 0.0
    return kth_best(exact_scores(postings, rows, seeds, acc), k)


def candidates(
    postings: Postings,
    rows: list[Row],
    k: int,
    excluded: IntArray | None,
    acc: ScoreArray,
) -> PositionArray | None:
    """Positions that may be in the top k (a superset of it); None: rank every match.

    `acc` is the caller's all-zero float32 scratch of one slot per document, left all-zero.
    """
    theta = seed_threshold(postings, rows, k, excluded, acc)
    if theta <= 0.0:
        return None
    bounds = [float(postings.maxes[term]) * count for _, _, count, term in rows]
    order = sorted(range(len(rows)), key=lambda i: bounds[i])
    spare, split = 0.0, 0  # rows order[:split] are non-essential; their bounds sum to spare
    budget = theta * (1.0 - _FLOOR_SHARE)
    while split < len(order) and (spare + bounds[order[split]]) * _HIGH < budget:
        spare += bounds[order[split]]
        split += 1
    if split == 0:
        return None
    essential = [rows[i] for i in order[split:]]
    found, partial = _add_rows(postings, essential, acc, theta - spare)
    if excluded is not None and len(excluded):
        keep = ~np.isin(found, excluded)
        found, partial = found[keep], partial[keep]
    for i in reversed(order[:split]):
        theta = max(theta, kth_best(partial, k) * _LOW)
        keep = (partial + spare) * _HIGH >= theta
        found, partial = found[keep], partial[keep]
        partial = partial + lookup(postings, rows[i], found, acc)
        spare -= bounds[i]
    theta = max(theta, kth_best(partial, k) * _LOW)
    return found[partial * _HIGH >= theta]


def _add_rows(
    postings: Postings, rows: list[Row], acc: ScoreArray, floor: float
) -> tuple[PositionArray, ScoreArray]:
    """The documents of `rows` whose weights there add up to `floor` or more (sorted),
    with those sums."""
    docs, weights = postings.docs, postings.weights
    parts = [docs[start:end] for start, end, _, _ in rows]
    for (start, end, count, _), row_docs in zip(rows, parts, strict=True):
        row_weights = weights[start:end]
        np.add.at(acc, row_docs, row_weights if count == 1 else row_weights * count)
    floor /= _HIGH
    if sum(len(row_docs) for row_docs in parts) * _DENSE_RATIO >= len(acc):
        # One pass over the buffer costs less than gathering at every posting (floor > 0,
        # so untouched documents never pass).
        found = np.flatnonzero(acc >= floor).astype(np.int32)
        partial = acc[found]
        acc.fill(0)
        return found, partial
    kept = [row_docs[acc[row_docs] >= floor] for row_docs in parts]
    found = kept[0] if len(kept) == 1 else sorted_unique(np.concatenate(kept))
    partial = acc[found]
    for row_docs in parts:
        acc[row_docs] = 0
    return found, partial


def sorted_unique(values: PositionArray) -> PositionArray:
    """np.unique by sorting (NumPy 2's hash-based unique is slower on these arrays)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    unique: PositionArray = ordered[keep]
    return unique
