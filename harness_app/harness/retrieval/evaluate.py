"""Ranking metrics and the BEIR evaluation used to check BM25 against published figures.

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
from typing import Any

from harness_app.harness.beir import load_beir
from harness_app.harness.retrieval.bm25 import BM25Index


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
) -> dict[str, Any]:
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
    count = max(len(judged), 1)
    return {
        "dataset": Path(folder).name,
        "split": split,
        "documents": documents,
        "queries": len(judged),
        "k1": k1,
        "b": b,
        "ndcg@10": round(sum(ndcg_at_k(runs[q], data.qrels[q], 10) for q, _ in judged) / count, 4),
        "recall@100": round(
            sum(recall_at_k(runs[q], data.qrels[q], 100) for q, _ in judged) / count, 4
        ),
        "queries_per_s": round(len(judged) / search_s, 1) if search_s > 0 else 0.0,
        "build_s": round(build_s, 3),
        "load_s": round(load_s, 4),
    }


def _has_relevant(judgements: Mapping[str, int] | None) -> bool:
    return judgements is not None and any(g > 0 for g in judgements.values())
