"""BM25's query loops compiled with Numba; imported only through kernel.py.

`exhaustive_top_k` ranks an unpruned query. It computes exactly what BM25Index's NumPy
path computes, with the same float32 arithmetic in the same order, so the two return the
same documents with bit-identical scores and the same tie order:

- each query row adds `weight * count` (float32) into the scratch buffer `acc`, rows in
  query order, postings in row order (what `np.add.at` over the concatenated rows does);
- excluded documents are dropped;
- the k best are kept by score descending, then corpus position ascending.

A document is "touched" the first time a row reaches it: BM25 weights are positive, so a
zero slot has not been reached yet. The touched positions are recorded without a branch
(the next slot is written anyway; the count moves on only for a new document), and the
buffer is left all-zero again for the next query.

`term_rows` finds query terms in the vocabulary (a StringTable: sorted 64-bit hashes,
their positions, and the strings to compare) and returns their postings slices, as
`BM25Index._look_up_rows` does with NumPy, in one call instead of about twenty.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np


def exhaustive_top_k(
    docs: Any, weights: Any, rows: Any, acc: Any, excluded: Any, k: int
) -> tuple[Any, Any]:
    """(positions, scores) of the best k matching documents, best first.

    `rows` is an int64 array of (first posting, end of postings, count in the query,
    term row) per query term; `excluded` the positions to leave out; `acc` the caller's
    all-zero float32 scratch of one slot per document, left all-zero.
    """
    total = 0
    for r in range(rows.shape[0]):
        total += rows[r, 1] - rows[r, 0]
    touched = np.empty(total, np.int32)
    n = 0
    for r in range(rows.shape[0]):
        start, end = rows[r, 0], rows[r, 1]
        if rows[r, 2] == 1:
            for p in range(start, end):
                d = docs[p]
                before = acc[d]
                touched[n] = d
                n += before == 0
                acc[d] = before + weights[p]
        else:
            count = np.float32(rows[r, 2])
            for p in range(start, end):
                d = docs[p]
                before = acc[d]
                touched[n] = d
                n += before == 0
                acc[d] = before + np.float32(weights[p] * count)
    for e in excluded:
        if acc[e] > 0:
            acc[e] = -np.inf  # touched: skipped below, then zeroed with the others
    best = np.empty(k, np.int64)
    scores = np.empty(k, np.float32)
    m = 0
    for i in range(n):
        d = touched[i]
        s = acc[d]
        acc[d] = 0
        if not s > 0:
            continue
        if m == k:
            if s < scores[k - 1] or (s == scores[k - 1] and d > best[k - 1]):
                continue
            j = k - 1
        else:
            j = m
            m += 1
        # insertion into the sorted best-so-far: score descending, position ascending
        while j > 0 and (scores[j - 1] < s or (scores[j - 1] == s and best[j - 1] > d)):
            scores[j] = scores[j - 1]
            best[j] = best[j - 1]
            j -= 1
        scores[j] = s
        best[j] = d
    return best[:m], scores[:m]


def term_rows(
    hashes: Any,
    order: Any,
    offsets: Any,
    blob: Any,
    indptr: Any,
    wanted: Any,
    encoded: Any,
    bounds: Any,
) -> Any:
    """(first posting, end of postings, term row) per wanted term; (0, 0, -1) if absent.

    `wanted` holds the terms' string hashes, `encoded` their UTF-8 bytes end to end with
    term i at `bounds[i]:bounds[i + 1]`. Equal hashes are adjacent in `hashes`; the bytes
    are compared, so a 64-bit collision cannot mislead.
    """
    out = np.zeros((len(wanted), 3), np.int64)
    for i in range(len(wanted)):
        out[i, 2] = -1
        at = np.searchsorted(hashes, wanted[i])
        first, size = bounds[i], bounds[i + 1] - bounds[i]
        while at < len(hashes) and hashes[at] == wanted[i]:
            row = order[at]
            start = offsets[row]
            if offsets[row + 1] - start == size:
                same = True
                for j in range(size):
                    if blob[start + j] != encoded[first + j]:
                        same = False
                        break
                if same:
                    out[i, 0], out[i, 1], out[i, 2] = indptr[row], indptr[row + 1], row
                    break
            at += 1
    return out


def _compile(function: Any) -> Any:
    """Compiled on first call, cached on disk where Numba finds a writable place for it
    (beside this file, else the user's cache folder, else NUMBA_CACHE_DIR); without
    one, compiled afresh in each process."""
    try:
        return numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True, boundscheck=False, error_model="numpy")(function)


compiled_exhaustive_top_k = _compile(exhaustive_top_k)
compiled_term_rows = _compile(term_rows)
