"""Ranking metrics and the BEIR evaluations of BM25, dense and hybrid retrieval.

The metrics follow trec_eval (what BEIR and Anserini report): gain is the relevance grade
itself (not 2^grade - 1), the discount is log2(rank + 1), and a document counts as relevant
when its grade is at least 1.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness_app.harness.beir import load_beir
from harness_app.harness.retrieval.bm25 import BM25Index
from harness_app.harness.retrieval.cache import open_index
from harness_app.harness.retrieval.hybrid import dense_build, retriever_open
from harness_app.harness.types import JSONObject

RECALL_CUTOFFS = (10, 30, 100)


def dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, 1))


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k of a ranked list of doc ids; 0.0 when nothing is relevant."""
    ideal = dcg(sorted((g for g in qrels.values() if g > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(qrels.get(doc_id, 0), 0) for doc_id in ranked[:k]]) / ideal


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 100) -> float:
    """Share of the relevant documents found in the top k; 0.0 when nothing is relevant."""
    relevant = {doc_id for doc_id, grade in qrels.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def evaluate_beir(
    folder: Path | str,
    split: str = "test",
    *,
    k1: float = 0.9,
    b: float = 0.4,
    index_dir: Path | str | None = None,
    depth: int = 100,
) -> JSONObject:
    """Build a BM25 index over a BEIR folder, run its judged queries and score them.

    Returns a flat, JSON-ready dict: ndcg@10, recall@100, queries_per_s, build_s, load_s
    and the counts. The index goes to `index_dir`, or to a temporary directory that is
    removed afterwards.
    """
    data = load_beir(folder, split)
    judged = [(qid, text) for qid, text, _ in data.queries if _has_relevant(data.qrels.get(qid))]
    with tempfile.TemporaryDirectory(prefix="bm25-eval-") as scratch:
        target = Path(index_dir) if index_dir is not None else Path(scratch) / "index"
        started = time.perf_counter()
        # Retrieval only: the harness's per-document analysis would only slow the build.
        BM25Index.build(data.corpus(), target, k1=k1, b=b, analysis=False)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        index = BM25Index.load(target)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        runs = {qid: [hit.doc_id for hit in index.search(text, depth)] for qid, text in judged}
        search_s = time.perf_counter() - started
        documents = len(index)
        del index  # release the memory maps before the temporary directory goes
    return {
        "dataset": Path(folder).name,
        "split": split,
        "retriever": "bm25",
        "documents": documents,
        "queries": len(judged),
        "k1": k1,
        "b": b,
        **score_runs(runs, data.qrels),
        "queries_per_s": round(len(judged) / search_s, 1) if search_s > 0 else 0.0,
        "build_s": round(build_s, 3),
        "load_s": round(load_s, 4),
    }


def evaluate_retriever(
    folder: Path | str, split: str = "test", *, retriever: str, index_dir: Path | str
) -> JSONObject:
    """Score the `retriever` ("bm25", "dense" or "hybrid") on a BEIR folder's judged queries.

    Unlike `evaluate_beir`, the BM25 index and the embeddings are kept in `index_dir`
    (built there on first use), because embedding a corpus takes minutes on a CPU.
    `embed_s` is the time taken to open, or build, the embeddings.
    """
    data = load_beir(folder, split)
    judged = [(qid, text) for qid, text, _ in data.queries if _has_relevant(data.qrels.get(qid))]
    bm25 = open_index(Path(folder), index_dir)
    started = time.perf_counter()
    searcher = retriever_open(retriever, bm25, build=dense_build)
    embed_s = time.perf_counter() - started
    searcher.search("warm up", 1)  # the encoder's first call is several times slower
    started = time.perf_counter()
    runs = {qid: [hit.doc_id for hit in searcher.search(text, 100)] for qid, text in judged}
    search_s = time.perf_counter() - started
    return {
        "dataset": Path(folder).name,
        "split": split,
        "retriever": retriever,
        "documents": len(bm25),
        "queries": len(judged),
        **score_runs(runs, data.qrels),
        "queries_per_s": round(len(judged) / search_s, 1) if search_s > 0 else 0.0,
        "embed_s": round(embed_s, 3),
    }


def score_runs(
    runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Mean nDCG@10 and recall at RECALL_CUTOFFS over the queries in `runs`."""
    count = max(len(runs), 1)
    scores = {"ndcg@10": sum(ndcg_at_k(run, qrels[q], 10) for q, run in runs.items()) / count}
    for k in RECALL_CUTOFFS:
        scores[f"recall@{k}"] = (
            sum(recall_at_k(run, qrels[q], k) for q, run in runs.items()) / count
        )
    return {name: round(value, 4) for name, value in scores.items()}


def _has_relevant(judgements: Mapping[str, int] | None) -> bool:
    return judgements is not None and any(g > 0 for g in judgements.values())
