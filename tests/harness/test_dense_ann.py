"""The HNSW graph over the dense embeddings (DENSE_ANN), and the exact search it stands
in for: recall against exact KNN, exclusions, rebuilds for other embeddings, clear
errors. The graph needs faiss (the dense extra); those tests skip, saying so, without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from harness_app.harness.cli import main
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.retrieval import dense as dense_module
from harness_app.harness.retrieval.ann import (
    GRAPH,
    MANIFEST,
    AnnUnavailableError,
    HnswIndex,
    ann_mode,
)
from harness_app.harness.retrieval.dense import DenseIndex, DenseIndexError
from harness_app.harness.retrieval.hybrid import DenseRetriever, retriever_open
from harness_app.harness.types import Document

try:
    import faiss  # noqa: F401

    HAVE_FAISS = True
except ImportError:
    HAVE_FAISS = False

needs_faiss = pytest.mark.skipif(
    not HAVE_FAISS, reason="faiss-cpu (the dense extra) is not installed"
)
DIMENSION = 32
ROWS = 3000


class TableEncoder:
    """Document `d<i>` is row i of a fixed matrix; any other text is hashed to a row."""

    name = "table-test"
    dimension = DIMENSION

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix

    def encode(self, texts: Sequence[str], *, progress=None) -> np.ndarray:
        rows = [self.matrix[int(text.split()[-1][1:]) % len(self.matrix)] for text in texts]
        if progress is not None:
            progress(len(texts), len(texts))
        return np.asarray(rows, dtype=np.float32)


def clustered(rows: int, seed: int = 7) -> np.ndarray:
    """Unit vectors around 40 centres, as real embeddings cluster by topic."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, DIMENSION))
    vectors = centres[rng.integers(0, 40, rows)] + 0.6 * rng.standard_normal((rows, DIMENSION))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[BM25Index, DenseIndex, TableEncoder]:
    folder = tmp_path_factory.mktemp("ann")
    matrix = clustered(ROWS)
    encoder = TableEncoder(matrix)
    docs = [Document(f"doc{i}", "", f"word{i % 17} d{i}") for i in range(ROWS)]
    bm25 = BM25Index.build(docs, folder / "index")
    dense = DenseIndex.build(
        bm25.directory, docs, encoder, count=ROWS, content_hash=bm25.content_hash
    )
    return bm25, dense, encoder


def queries(count: int) -> np.ndarray:
    return clustered(count, seed=99)


def exact_top(dense: DenseIndex, query: np.ndarray, k: int) -> list[str]:
    return [doc_id for doc_id, _ in dense.search(query, k)]


@needs_faiss
def test_the_graph_finds_nearly_every_exact_neighbour(built) -> None:
    bm25, dense, _ = built
    graph = HnswIndex.ensure(dense)
    assert (dense.folder / GRAPH).exists() and (dense.folder / MANIFEST).exists()
    with_graph = DenseIndex.load(bm25.directory, encoder_name="table-test")
    with_graph.ann = graph
    found = total = 0
    for query in queries(100):
        truth = set(exact_top(dense, query, 10))
        approximate = [doc_id for doc_id, _ in with_graph.search(query, 10)]
        assert len(approximate) == 10
        found += len(truth & set(approximate))
        total += 10
    assert found / total >= 0.95, f"recall@10 against exact search is {found / total:.3f}"


@needs_faiss
def test_the_graph_never_returns_an_excluded_document_and_still_fills_k(built) -> None:
    bm25, dense, _ = built
    with_graph = DenseIndex.load(bm25.directory, encoder_name="table-test")
    with_graph.ann = HnswIndex.ensure(dense)
    query = queries(1)[0]
    first = [doc_id for doc_id, _ in with_graph.search(query, 10)]
    second = with_graph.search(query, 10, exclude=set(first))
    assert len(second) == 10
    assert not set(first) & {doc_id for doc_id, _ in second}
    scores = [score for _, score in second]
    assert scores == sorted(scores, reverse=True)


@needs_faiss
def test_the_same_embeddings_give_the_same_graph_and_results(built, tmp_path: Path) -> None:
    bm25, dense, encoder = built
    first = HnswIndex.ensure(dense)
    other = tmp_path / "index"
    docs = list(bm25.iter_documents())
    copy_bm25 = BM25Index.build(docs, other)
    copy = DenseIndex.build(
        copy_bm25.directory, docs, encoder, count=ROWS, content_hash=copy_bm25.content_hash
    )
    second = HnswIndex.ensure(copy)
    for query in queries(20):
        a_positions, a_scores = first.search(query, 10)
        b_positions, b_scores = second.search(query, 10)
        assert a_positions.tolist() == b_positions.tolist()
        assert np.allclose(a_scores, b_scores)


@needs_faiss
def test_a_graph_for_other_embeddings_is_refused_then_rebuilt(built) -> None:
    _, dense, _ = built
    HnswIndex.ensure(dense)
    manifest_path = dense.folder / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["documents"] = ROWS - 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(DenseIndexError, match="built for other embeddings"):
        HnswIndex.load(dense)
    rebuilt = HnswIndex.ensure(dense)
    assert len(rebuilt) == ROWS
    assert json.loads(manifest_path.read_text())["documents"] == ROWS


@needs_faiss
def test_a_graph_without_its_manifest_is_never_searched(built) -> None:
    _, dense, _ = built
    HnswIndex.ensure(dense)
    (dense.folder / MANIFEST).unlink()
    with pytest.raises(DenseIndexError, match="no HNSW graph"):
        HnswIndex.load(dense)
    assert len(HnswIndex.ensure(dense)) == ROWS


@needs_faiss
def test_retriever_open_searches_the_graph_when_asked(built) -> None:
    bm25, _, encoder = built
    exact = retriever_open("dense", bm25, encoder=encoder, ann="exact")
    graph = retriever_open("dense", bm25, encoder=encoder, ann="hnsw")
    auto = retriever_open("dense", bm25, encoder=encoder, ann="auto")
    assert isinstance(graph, DenseRetriever) and graph.dense.ann is not None
    assert isinstance(exact, DenseRetriever) and exact.dense.ann is None
    assert isinstance(auto, DenseRetriever) and auto.dense.ann is None  # 3,000 docs: exact
    hits = graph.search("anything d5", 5)
    assert hits[0].doc_id == "doc5"  # the query is row 5 itself


def test_hnsw_without_faiss_says_what_to_install(built, monkeypatch) -> None:
    bm25, _, encoder = built
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(AnnUnavailableError, match="faiss-cpu"):
        retriever_open("dense", bm25, encoder=encoder, ann="hnsw")
    # exact search does not need it
    assert retriever_open("dense", bm25, encoder=encoder, ann="exact").search("x d3", 1)


def test_an_unknown_ann_mode_is_refused_by_name(monkeypatch) -> None:
    with pytest.raises(ValueError, match="DENSE_ANN='graph'"):
        ann_mode("graph")
    monkeypatch.setenv("DENSE_ANN", "hnsw")
    assert ann_mode() == "hnsw"
    monkeypatch.setenv("DENSE_ANN", "")
    assert ann_mode() == "exact"


def test_the_cli_names_a_bad_dense_ann(tmp_path: Path, monkeypatch, capsys) -> None:
    data = tmp_path / "beir"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        json.dumps({"_id": "a", "title": "A", "text": "alpha beta"}) + "\n"
    )
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "alpha"}) + "\n")
    (data / "qrels").mkdir()
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    monkeypatch.setenv("DENSE_ANN", "graph")
    code = main(["eval", str(data), "--retriever", "dense", "--index-dir", str(tmp_path / "idx")])
    assert code != 0
    assert "DENSE_ANN='graph'" in capsys.readouterr().err


def test_exact_search_is_the_same_widened_in_memory_or_block_by_block(built, monkeypatch) -> None:
    bm25, _, _ = built
    widened = DenseIndex.load(bm25.directory, encoder_name="table-test")
    widened.search(queries(1)[0], 1)  # widens on first use, under the default limit
    monkeypatch.setattr(dense_module, "WIDEN_BELOW_BYTES", 0)
    blockwise = DenseIndex.load(bm25.directory, encoder_name="table-test")
    for query in queries(10):
        a = widened.search(query, 10)
        b = blockwise.search(query, 10)
        assert [doc_id for doc_id, _ in a] == [doc_id for doc_id, _ in b]
        assert np.allclose([s for _, s in a], [s for _, s in b], atol=1e-5)
    assert widened._widened is not None and blockwise._widened is None


OPEN_IN_A_FRESH_PROCESS = """
import sys
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.retrieval.ann import HnswIndex
from harness_app.harness.retrieval.dense import DenseIndex

def anonymous_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))

bm25 = BM25Index.load(sys.argv[1])
dense = DenseIndex.load(bm25.directory, encoder_name="table-test")
import faiss  # noqa: F401 (its own memory is not the graph's)
before = anonymous_kb()
graph = HnswIndex.load(dense)
positions, _ = graph.search(dense.matrix[123].astype("float32"), 5)
print(int(positions[0]), (anonymous_kb() - before) / 1024)
"""


@needs_faiss
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_the_graph_maps_its_vectors_instead_of_copying_them(tmp_path) -> None:
    """Each worker process opens the graph; its float32 vectors (the bulk of it) must be
    shared through the page cache, not copied into every process's private memory."""
    rows, dimension = 10_000, 384  # 15 MB of float32 vectors
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((rows, dimension)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    encoder = TableEncoder(matrix)
    encoder.dimension = dimension
    docs = [Document(f"doc{i}", "", f"word{i % 17} d{i}") for i in range(rows)]
    bm25 = BM25Index.build(docs, tmp_path / "index", analysis=False)
    dense = DenseIndex.build(bm25.directory, docs, encoder, count=rows, content_hash="")
    HnswIndex.ensure(dense, neighbours=16, ef_construction=40)
    opened = subprocess.run(
        [sys.executable, "-c", OPEN_IN_A_FRESH_PROCESS, str(bm25.directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    nearest, grown_mb = opened.stdout.split()
    assert int(nearest) == 123
    assert float(grown_mb) < 6, f"opening the graph took {grown_mb} MB of private memory"
