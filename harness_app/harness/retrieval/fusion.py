"""Reciprocal-rank fusion: combine ranked lists from different retrievers.

RRF (Cormack et al., 2009) scores a document by sum(1 / (k + rank)) over the lists it
appears in. It needs no score calibration between, say, BM25 and a dense retriever, which
is why it is the usual way to fuse them; k = 60 is the value from the paper.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_app.harness.types import SearchHit


def reciprocal_rank_fusion(
    hit_lists: Sequence[Sequence[SearchHit]], *, k: int = 60, limit: int | None = None
) -> list[SearchHit]:
    """Fused hits, best first. Ties keep the order in which documents were first seen."""
    if k < 0:
        raise ValueError("k must be non-negative")
    scores: dict[str, float] = {}
    for hits in hit_lists:
        for hit in hits:
            scores[hit.doc_id] = scores.get(hit.doc_id, 0.0) + 1.0 / (k + hit.rank)
    # sorted() is stable and dicts keep first-seen order, which settles ties.
    ranked = sorted(scores.items(), key=lambda item: -item[1])
    if limit is not None:
        ranked = ranked[:limit]
    return [SearchHit(doc_id=d, score=s, rank=i) for i, (d, s) in enumerate(ranked, 1)]
