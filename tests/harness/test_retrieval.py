"""BM25 index: Lucene's scores, persistence, exclusion, staleness, metrics and fusion."""

from __future__ import annotations

import json
import math
import random
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_app.harness.retrieval import (
    BM25Index,
    CorruptIndexError,
    StaleIndexError,
    corpus_content_hash,
    evaluate_beir,
    ndcg_at_k,
    open_index,
    recall_at_k,
    reciprocal_rank_fusion,
)
from harness_app.harness.retrieval import cache as index_cache
from harness_app.harness.retrieval.lucene import decoded_lengths, encode_lengths
from harness_app.harness.text import analyze
from harness_app.harness.types import Document, Retriever, SearchHit

THREE_DOCS = [
    Document("d1", "", "apple banana"),
    Document("d2", "", "apple apple cherry"),
    Document("d3", "", "banana cherry cherry date"),
]


@pytest.fixture
def three(tmp_path) -> BM25Index:
    return BM25Index.build(THREE_DOCS, tmp_path / "idx")


def ids(hits: list[SearchHit]) -> list[str]:
    return [h.doc_id for h in hits]


def test_implements_the_retriever_protocol(three):
    assert isinstance(three, Retriever)


def test_scores_match_a_hand_computed_bm25(three):
    # N = 3, lengths 2, 3, 4 -> avgdl 3; "apple" is in 2 docs; k1 = 0.9, b = 0.4.
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    norm_d1 = 0.9 * (1 - 0.4 + 0.4 * 2 / 3)
    norm_d2 = 0.9 * (1 - 0.4 + 0.4 * 3 / 3)
    hits = three.search("apple", k=10)
    assert ids(hits) == ["d2", "d1"]
    assert hits[0].score == pytest.approx(idf * 2 / (2 + norm_d2), rel=1e-6)
    assert hits[1].score == pytest.approx(idf * 1 / (1 + norm_d1), rel=1e-6)
    assert [h.rank for h in hits] == [1, 2]


def test_query_terms_add_up_and_repeats_count(three):
    one = {h.doc_id: h.score for h in three.search("cherry")}
    both = {h.doc_id: h.score for h in three.search("apple cherry")}
    apple = {h.doc_id: h.score for h in three.search("apple")}
    assert both["d2"] == pytest.approx(apple["d2"] + one["d2"], rel=1e-6)
    twice = {h.doc_id: h.score for h in three.search("apple apple")}
    assert twice["d1"] == pytest.approx(2 * apple["d1"], rel=1e-6)


def test_unknown_and_stop_word_queries_return_nothing(three):
    assert three.search("zebra") == []
    assert three.search("the of and") == []
    assert three.search("apple", k=0) == []


def test_exclude_never_returns_excluded_ids(three):
    assert ids(three.search("apple cherry", k=10, exclude={"d2"})) == ["d3", "d1"]
    assert three.search("apple", k=10, exclude={"d1", "d2", "not-a-doc"}) == []


def test_document_access(three):
    assert len(three) == 3
    assert "d2" in three and "nope" not in three and 5 not in three
    assert three.document("d3") == THREE_DOCS[2]
    assert list(three.iter_documents()) == THREE_DOCS
    with pytest.raises(KeyError):
        three.document("nope")


def test_build_load_round_trip(tmp_path):
    docs = [
        Document(f"id-{i}", f"Title {i} é", f"text {i} with ünïcode " * (i % 7)) for i in range(600)
    ]
    built = BM25Index.build(docs, tmp_path / "idx")
    loaded = BM25Index.load(tmp_path / "idx")
    assert list(loaded.iter_documents()) == docs
    assert loaded.document("id-599") == docs[599]
    assert loaded.content_hash == built.content_hash == corpus_content_hash(docs)
    assert loaded.search("text 42 title") == built.search("text 42 title")
    assert isinstance(loaded._weights.base, np.memmap)  # mapped, not read into memory


def test_rebuilding_replaces_the_old_index(tmp_path):
    BM25Index.build(THREE_DOCS, tmp_path / "idx")
    rebuilt = BM25Index.build([Document("x", "", "kiwi")], tmp_path / "idx")
    assert len(BM25Index.load(tmp_path / "idx")) == 1 == len(rebuilt)
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # no staging or old copies left


def test_duplicate_ids_fail_the_build_and_leave_nothing(tmp_path):
    with pytest.raises(ValueError, match="duplicate document id 'd1'"):
        BM25Index.build([*THREE_DOCS, Document("d1", "", "again")], tmp_path / "idx")
    assert list(tmp_path.iterdir()) == []


def test_empty_corpus(tmp_path):
    index = BM25Index.build([], tmp_path / "idx")
    assert len(index) == 0 and index.search("anything") == []


def test_ties_break_by_corpus_order(tmp_path):
    docs = [Document(str(i), "", "same words here") for i in range(30)]
    index = BM25Index.build(docs, tmp_path / "idx")
    assert ids(index.search("words", k=5)) == ["0", "1", "2", "3", "4"]


def naive_bm25(docs: list[Document], query: str, k1=0.9, b=0.4) -> dict[str, float]:
    """Textbook Lucene BM25 (documents kept under 24 terms, where lengths are exact)."""
    bags = [Counter(analyze(f"{d.title} {d.text}")) for d in docs]
    lengths = [sum(bag.values()) for bag in bags]
    n = sum(1 for length in lengths if length)
    avgdl = sum(lengths) / n
    scores: dict[str, float] = {}
    for term, count in Counter(analyze(query)).items():
        df = sum(1 for bag in bags if term in bag)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc, bag, length in zip(docs, bags, lengths, strict=True):
            if tf := bag.get(term, 0):
                norm = k1 * (1 - b + b * length / avgdl)
                scores[doc.doc_id] = scores.get(doc.doc_id, 0.0) + count * idf * tf / (tf + norm)
    return scores


def test_search_agrees_with_a_naive_implementation_on_a_random_corpus(tmp_path):
    rng = random.Random(7)
    vocab = [f"w{i}x" for i in range(60)]
    weights = [1 / (i + 1) for i in range(60)]  # Zipf-like: common and rare terms both
    docs = [
        Document(f"doc{i}", "", " ".join(rng.choices(vocab, weights, k=rng.randint(0, 20))))
        for i in range(400)
    ]
    index = BM25Index.build(docs, tmp_path / "idx")
    # common terms exercise the dense path, rare ones the sparse path
    for query in ["w0x", "w0x w1x w2x", "w50x w59x", "w3x w3x w40x", "w1x w58x"]:
        excluded = {"doc3", "doc10"}
        expected = naive_bm25(docs, query)
        ranked = sorted(expected.items(), key=lambda kv: (-kv[1], int(kv[0][3:])))
        top = [(d, s) for d, s in ranked if d not in excluded][:15]
        hits = index.search(query, k=15, exclude=excluded)
        assert ids(hits) == [d for d, _ in top]
        assert [h.score for h in hits] == pytest.approx([s for _, s in top], rel=1e-5)


def test_concurrent_searches_get_their_own_buffers(tmp_path):
    extra = [Document(f"x{i}", "", "apple kiwi") for i in range(50)]
    index = BM25Index.build([*THREE_DOCS, *extra], tmp_path / "idx")
    expected = {q: index.search(q) for q in ("apple", "kiwi cherry", "banana date")}
    failures = []

    def hammer(query: str) -> None:
        for _ in range(200):
            if index.search(query) != expected[query]:
                failures.append(query)

    threads = [threading.Thread(target=hammer, args=(q,)) for q in expected for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# --- Lucene length quantisation ---------------------------------------------------------


def test_short_lengths_are_exact_and_long_ones_rounded_down():
    assert encode_lengths(range(24)).tolist() == list(range(24))
    table = decoded_lengths()
    assert table[encode_lengths([100])[0]] == 96  # 3 significant bits after the implicit one
    assert table[255] == 24 + (0b1111 << 27)  # the largest code covers any int32 length


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_quantised_length_is_close_below(length):
    decoded = decoded_lengths()[encode_lengths([length])[0]]
    assert decoded <= length
    assert length - decoded <= max(length - 24, 0) / 8


def test_quantisation_is_monotonic():
    codes = encode_lengths(np.arange(0, 5000))
    assert np.all(np.diff(codes.astype(int)) >= 0)


# --- staleness and the cache ------------------------------------------------------------


def test_load_with_another_content_hash_is_stale(three):
    with pytest.raises(StaleIndexError, match="other content"):
        BM25Index.load(three.directory, expected_content_hash="0" * 64)
    assert BM25Index.load(three.directory, expected_content_hash=three.content_hash)


def test_index_from_another_analyzer_version_is_stale(three):
    manifest_path = three.directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "analyzer": "old-analyzer"}))
    with pytest.raises(StaleIndexError, match="old-analyzer"):
        BM25Index.load(three.directory)


def test_missing_manifest_or_truncated_arrays_are_corrupt(three):
    postings = three.directory / "postings.weights.npy"
    postings.write_bytes(postings.read_bytes()[:-8])
    with pytest.raises(CorruptIndexError):
        BM25Index.load(three.directory)
    (three.directory / "manifest.json").unlink()
    with pytest.raises(CorruptIndexError, match=r"no manifest\.json"):
        BM25Index.load(three.directory)


def test_content_hash_sees_every_field_and_boundaries():
    base = corpus_content_hash(THREE_DOCS)
    assert corpus_content_hash(list(THREE_DOCS)) == base
    assert corpus_content_hash([Document("d1", "", "apple banana!"), *THREE_DOCS[1:]]) != base
    assert corpus_content_hash([Document("a", "bc", "")]) != corpus_content_hash(
        [Document("ab", "c", "")]
    )


@pytest.fixture
def fresh_cache():
    index_cache.forget_open_indexes()
    yield
    index_cache.forget_open_indexes()


def test_open_index_builds_once_and_shares_per_process(tmp_path, fresh_cache):
    calls = []

    def corpus():
        calls.append(1)
        return iter(THREE_DOCS)

    first = open_index(corpus, tmp_path / "cache")
    second = open_index(corpus, tmp_path / "cache")
    assert first is second
    assert len(calls) == 3  # hash, build, hash again; the build happened once
    index_cache.forget_open_indexes()
    reopened = open_index(corpus, tmp_path / "cache", content_hash=first.content_hash)
    assert reopened is not first and len(calls) == 3  # known hash: loaded, corpus unread
    assert reopened.search("apple") == first.search("apple")


def test_open_index_rebuilds_a_corrupt_index(tmp_path, fresh_cache):
    first = open_index(lambda: THREE_DOCS, tmp_path / "cache")
    (first.directory / "postings.docs.npy").write_bytes(b"garbage")
    index_cache.forget_open_indexes()
    again = open_index(lambda: THREE_DOCS, tmp_path / "cache")
    assert again.directory == first.directory
    assert ids(again.search("apple")) == ["d2", "d1"]


def test_open_index_gives_changed_content_a_new_index(tmp_path, fresh_cache):
    first = open_index(lambda: THREE_DOCS, tmp_path / "cache")
    changed = open_index(lambda: THREE_DOCS[:2], tmp_path / "cache")
    assert changed.directory != first.directory and len(changed) == 2


def test_open_index_reads_a_beir_folder(tmp_path, fresh_cache):
    folder = tmp_path / "beir"
    folder.mkdir()
    rows = [{"_id": d.doc_id, "title": d.title, "text": d.text} for d in THREE_DOCS]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = open_index(folder, tmp_path / "cache")
    assert index.content_hash == corpus_content_hash(THREE_DOCS)
    assert open_index(folder / "corpus.jsonl", tmp_path / "cache") is index


# --- metrics and fusion -----------------------------------------------------------------


def test_ndcg_hand_computed():
    qrels = {"d1": 1, "d3": 2, "d4": 1, "d9": 0}
    # DCG = 1/log2(2) + 0 + 2/log2(4) = 2; ideal = 2/1 + 1/log2(3) + 1/log2(4)
    assert ndcg_at_k(["d1", "d2", "d3"], qrels, 3) == pytest.approx(2 / (2.5 + 1 / math.log2(3)))
    assert ndcg_at_k(["d3", "d1", "d4"], qrels, 3) == pytest.approx(1.0)
    assert ndcg_at_k(["d9"], qrels, 10) == 0.0
    assert ndcg_at_k(["d1"], {"d1": 0}, 10) == 0.0


def test_recall_hand_computed():
    qrels = {"d1": 1, "d3": 2, "d4": 1, "d9": 0}
    assert recall_at_k(["d1", "d9", "d3"], qrels, 2) == pytest.approx(1 / 3)
    assert recall_at_k(["d1", "d9", "d3"], qrels, 3) == pytest.approx(2 / 3)
    assert recall_at_k(["x"], {}, 10) == 0.0


def test_reciprocal_rank_fusion():
    bm25 = [SearchHit("a", 9.0, 1), SearchHit("b", 5.0, 2)]
    dense = [SearchHit("b", 0.9, 1), SearchHit("c", 0.8, 2)]
    fused = reciprocal_rank_fusion([bm25, dense], k=60)
    assert ids(fused) == ["b", "a", "c"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert [h.rank for h in fused] == [1, 2, 3]
    assert ids(reciprocal_rank_fusion([bm25, dense], limit=1)) == ["b"]


# --- the published reference ------------------------------------------------------------


def test_scifact_matches_the_anserini_flat_reference(scifact_dir: Path, tmp_path):
    result = evaluate_beir(scifact_dir, "test", index_dir=tmp_path / "scifact")
    assert result["queries"] == 300
    assert result["ndcg@10"] == pytest.approx(0.6789, abs=0.01)
    assert result["recall@100"] == pytest.approx(0.9253, abs=0.01)
    json.dumps(result)  # the CLI prints it as JSON
