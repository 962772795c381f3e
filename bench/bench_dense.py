"""Dense and hybrid retrieval speed: encoding throughput and per-query latency at 100k docs.

    .venv/bin/python -m bench.bench_dense                       # 100k docs, 512 encoded
    .venv/bin/python -m bench.bench_dense --size 20000 --encode-sample 256 --queries 100
    .venv/bin/python -m bench.bench_dense --full-encode         # embed every document
    .venv/bin/python -m bench.bench_dense --ann --rows clustered  # and the HNSW graph

Documents are synthetic, made as bench/bench_retrieval.py makes them (real titles and two to
six real sentences from ../shared/data); queries are the real HotpotQA and SciFact questions.

Embedding 100k documents with all-MiniLM-L6-v2 takes hours on two shared CPU cores, so by
default the encoder's rate is measured on a sample of `--encode-sample` documents and the
100k-row matrix is filled with random unit rows: search cost does not depend on the values.
Query latency is always real: the query is encoded by the real encoder (no cache) and
searched against the 100k x 384 float16 matrix; the hybrid adds BM25's top 25 and RRF.
`--ann` also builds the HNSW graph (retrieval/ann.py, DENSE_ANN=hnsw) and times the same
searches through it, with its recall@10 against exact search on the same query vectors.
Random rows are the worst case for a graph (no neighbourhoods to find); `--rows clustered`
fills the matrix around 1,000 centres instead, closer to how real embeddings lie.
Needs the dense extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_retrieval import DEFAULT_DATA, latency_stats, load_material, write_corpus
from harness_app.harness.beir import iter_corpus
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.retrieval.ann import GRAPH, HnswIndex
from harness_app.harness.retrieval.dense import DenseIndex, embedded_text
from harness_app.harness.retrieval.encoder import default_encoder, encoder_available
from harness_app.harness.retrieval.hybrid import DenseRetriever, HybridRetriever


class RandomRows:
    """Stands in for the encoder while filling the matrix: random unit rows, same name;
    clustered, they scatter around 1,000 random centres."""

    def __init__(self, name: str, dimension: int, clustered: bool = False) -> None:
        self.name, self.dimension = name, dimension
        self._rng = np.random.default_rng(7)
        self._centres = self._rng.standard_normal((1000, dimension)) if clustered else None

    def encode(self, texts: Sequence[str], *, progress: Any = None) -> np.ndarray:
        rows = self._rng.standard_normal((len(texts), self.dimension))
        if self._centres is not None:
            rows = self._centres[self._rng.integers(0, len(self._centres), len(texts))] + rows
        rows = rows.astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def time_calls(call: Any, queries: list[str]) -> dict[str, float]:
    latencies = []
    for query in queries:
        wall, cpu = time.perf_counter(), time.thread_time()
        call(query)
        latencies.append((time.perf_counter() - wall, time.thread_time() - cpu))
    return latency_stats(latencies)


def encode_rate(corpus: Path, sample: int) -> dict[str, float]:
    encoder = default_encoder()
    texts = [embedded_text(doc) for _, doc in zip(range(sample), iter_corpus(corpus), strict=False)]
    encoder.encode(texts[:8])  # the first call pays for lazy initialisation
    started = time.perf_counter()
    encoder.encode(texts)
    took = time.perf_counter() - started
    return {
        "encoded": len(texts),
        "seconds": round(took, 2),
        "docs_per_s": round(len(texts) / took, 1),
    }


def bench(
    size: int, sample: int, query_count: int, full: bool, data: Path, rows: str, ann: bool
) -> dict[str, Any]:
    titles, sentences, queries = load_material(data)
    queries = queries[:query_count]
    with tempfile.TemporaryDirectory(prefix="bench-dense-") as scratch:
        corpus = Path(scratch) / "corpus.jsonl"
        write_corpus(corpus, size, titles, sentences)
        print(f"building BM25 over {size} documents...", file=sys.stderr)
        bm25 = BM25Index.build(iter_corpus(corpus), Path(scratch) / "index", analysis=False)
        print(f"encoding {sample} documents...", file=sys.stderr)
        rate = encode_rate(corpus, sample)
        encoder = default_encoder()
        filler = (
            encoder if full else RandomRows(encoder.name, encoder.dimension, rows == "clustered")
        )
        started = time.perf_counter()
        dense = DenseIndex.build(
            bm25.directory,
            bm25.iter_documents(),
            filler,
            count=len(bm25),
            content_hash=bm25.content_hash,
        )
        fill_s = time.perf_counter() - started
        result = {
            "documents": len(bm25),
            "dimension": encoder.dimension,
            "matrix_mb": round(dense.matrix.nbytes / 2**20, 1),
            "matrix_rows": "encoded" if full else f"{rows} random unit rows",
            "encode": rate,
            "estimated_full_encode_s": round(size / rate["docs_per_s"], 0),
            "matrix_fill_s": round(fill_s, 2),
            **latencies(bm25, dense, encoder, queries),
        }
        if ann:
            result.update(graph_figures(bm25, dense, encoder, queries))
    return result


def graph_figures(
    bm25: BM25Index, dense: DenseIndex, encoder: Any, queries: list[str]
) -> dict[str, Any]:
    """Build the HNSW graph, then time it and measure its recall@10 against exact."""
    print(f"building the HNSW graph over {len(dense)} rows...", file=sys.stderr)
    started = time.perf_counter()
    graph = HnswIndex.ensure(dense)
    build_s = time.perf_counter() - started
    vectors = encoder.encode(queries)
    exact = [[doc for doc, _ in dense.search(vector, 10)] for vector in vectors]
    dense.ann = graph
    approximate = [[doc for doc, _ in dense.search(vector, 10)] for vector in vectors]
    found = sum(len(set(a) & set(e)) for a, e in zip(approximate, exact, strict=True))
    timed = {f"{name}_hnsw": row for name, row in latencies(bm25, dense, encoder, queries).items()}
    del timed["encode_query_hnsw"], timed["bm25_hnsw"]
    return {
        "hnsw_build_s": round(build_s, 1),
        "hnsw_file_mb": round((dense.folder / GRAPH).stat().st_size / 2**20, 1),
        "hnsw_recall_at_10": round(found / max(1, 10 * len(exact)), 4),
        **timed,
    }


def latencies(
    bm25: BM25Index, dense: DenseIndex, encoder: Any, queries: list[str]
) -> dict[str, Any]:
    knn = DenseRetriever(bm25, dense, encoder)
    hybrid = HybridRetriever(bm25, knn)
    vector = encoder.encode(["warm up"])[0]
    dense.search(vector, 10)  # widens the matrix to float32 once (dense.py)

    def uncached(search: Any) -> Any:
        def call(query: str) -> Any:
            knn._vectors.clear()  # every query encoded afresh
            return search(query, 10)

        return call

    return {
        "encode_query": time_calls(lambda q: encoder.encode([q]), queries),
        "dense_search_only": time_calls(lambda q: dense.search(vector, 10), queries),
        "bm25": time_calls(lambda q: bm25.search(q, 10), queries),
        "dense": time_calls(uncached(knn.search), queries),
        "hybrid": time_calls(uncached(hybrid.search), queries),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="documents (default 100k)")
    parser.add_argument("--encode-sample", type=int, default=512, help="documents encoded")
    parser.add_argument("--queries", type=int, default=200, help="timed queries")
    parser.add_argument("--full-encode", action="store_true", help="embed every document")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--ann", action="store_true", help="also build and time the HNSW graph")
    parser.add_argument(
        "--rows", choices=("random", "clustered"), default="random", help="matrix filler"
    )
    args = parser.parse_args(argv)
    if not encoder_available():
        print(
            "error: the dense extra is not installed (pip install -e '.[dense]')", file=sys.stderr
        )
        return 2
    if not (args.data / "scifact").is_dir():
        print(f"error: no benchmark data in {args.data}", file=sys.stderr)
        return 2
    result = bench(
        args.size,
        args.encode_sample,
        args.queries,
        args.full_encode,
        args.data,
        args.rows,
        args.ann,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{result['documents']} docs x {result['dimension']} float16 ({result['matrix_mb']} MB, "
        f"{result['matrix_rows']}); encode {result['encode']['docs_per_s']} docs/s "
        f"(~{result['estimated_full_encode_s']:.0f} s for all)"
    )
    if args.ann:
        print(
            f"HNSW graph: built in {result['hnsw_build_s']} s, {result['hnsw_file_mb']} MB, "
            f"recall@10 against exact {result['hnsw_recall_at_10']}"
        )
    names = ["encode_query", "dense_search_only", "bm25", "dense", "hybrid"]
    if args.ann:
        names += ["dense_search_only_hnsw", "dense_hnsw", "hybrid_hnsw"]
    for name in names:
        row = result[name]
        print(f"  {name:22} p50 {row['p50_ms']:8.2f} ms  p99 {row['p99_ms']:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
