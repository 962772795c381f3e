"""Retrieval for the harness: a memory-mapped BM25 index, its cache, metrics and fusion."""

from harness_app.harness.retrieval.bm25 import (
    BM25Index,
    BM25IndexError,
    CorruptIndexError,
    StaleIndexError,
)
from harness_app.harness.retrieval.cache import index_key, open_index
from harness_app.harness.retrieval.evaluate import evaluate_beir, ndcg_at_k, recall_at_k
from harness_app.harness.retrieval.fusion import reciprocal_rank_fusion
from harness_app.harness.retrieval.store import corpus_content_hash

__all__ = [
    "BM25Index",
    "BM25IndexError",
    "CorruptIndexError",
    "StaleIndexError",
    "corpus_content_hash",
    "evaluate_beir",
    "index_key",
    "ndcg_at_k",
    "open_index",
    "recall_at_k",
    "reciprocal_rank_fusion",
]
