"""The compiled BM25 scorer returns what NumPy's exhaustive ranking returns, bit for bit.

BM25Index ranks an unpruned query with one compiled loop when Numba is installed
(kernel.py). These tests hold it to `search_exhaustive`, which always ranks with NumPy:
same ids, same scores to the bit, same tie order, on generated corpora with repeated
query terms, exclusions and every k from 1 to 128; and they check how BM25_KERNEL is
chosen and what happens when Numba is missing.
"""

from __future__ import annotations

import logging
import random
import sys
import threading

import pytest

from harness_app.harness import retrieval
from harness_app.harness.retrieval import BM25Index, kernel
from harness_app.harness.retrieval import bm25 as bm25_module
from harness_app.harness.types import Document
from tests.harness.test_retrieval_pruning import as_pairs, generated_corpus, random_query

pytest.importorskip("numba", reason="the compiled scorer needs numba (a core dependency)")


@pytest.fixture
def built(tmp_path):
    def build(seed: int, size: int, **params) -> BM25Index:
        BM25Index.build(generated_corpus(seed, size), tmp_path / "idx", analysis=False, **params)
        return BM25Index.load(tmp_path / "idx", kernel="numba")

    return build


@pytest.mark.parametrize(("k1", "b"), [(0.9, 0.4), (1.2, 0.75), (2.0, 1.0)])
def test_compiled_scorer_equals_numpy_ranking(built, k1, b):
    index = built(seed=21, size=2500, k1=k1, b=b)
    assert index.kernel is not None
    rng = random.Random(7)
    for trial in range(200):
        query = random_query(rng)
        k = rng.randint(1, bm25_module._KERNEL_MAX_K)
        exclude: set[str] = set()
        if trial % 2:
            best = index.search_exhaustive(query, k=60)
            exclude = {h.doc_id for h in best[: rng.randint(1, 30)]}
            exclude |= {f"d{rng.randrange(len(index))}" for _ in range(20)} | {"not-an-id"}
        expected = index.search_exhaustive(query, k=k, exclude=exclude)
        got = index.search(query, k=k, exclude=exclude)
        assert as_pairs(got) == as_pairs(expected), (query, k, sorted(exclude))
    assert not index._buffer().any()  # the scratch is left all-zero for the next query


def test_ties_keep_corpus_order(tmp_path):
    # Equal scores everywhere: the order is corpus order, minus what is excluded.
    docs = [Document(f"t{i}", "", "alpha beta gamma") for i in range(300)]
    BM25Index.build(docs, tmp_path / "idx", analysis=False)
    index = BM25Index.load(tmp_path / "idx", kernel="numba")
    for k in (1, 10, 100):
        hits = index.search("gamma alpha", k=k, exclude={"t0", "t3"})
        assert [h.doc_id for h in hits] == [f"t{i}" for i in range(300) if i not in (0, 3)][:k]
        assert len({h.score for h in hits}) == 1


def test_fewer_matches_than_k_and_no_match(built):
    index = built(seed=4, size=300)
    rare = index.search("w399x", k=100)
    assert rare == index.search_exhaustive("w399x", k=100)
    assert len(rare) < 100
    assert index.search("nothing-like-this", k=10) == []
    assert index.search("w1x", k=0) == []


def test_a_large_k_is_ranked_by_numpy(built):
    index = built(seed=5, size=1500)
    k = bm25_module._KERNEL_MAX_K + 50
    query = "w0x w3x w17x w150x"
    assert as_pairs(index.search(query, k=k)) == as_pairs(index.search_exhaustive(query, k=k))


def test_threads_share_the_compiled_scorer(built):
    index = built(seed=8, size=2000)
    queries = [random_query(random.Random(i)) for i in range(40)]
    expected = [as_pairs(index.search_exhaustive(q, k=20)) for q in queries]
    failures: list[str] = []

    def work() -> None:
        for query, want in zip(queries, expected, strict=True):
            if as_pairs(index.search(query, k=20)) != want:
                failures.append(query)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_bm25_kernel_chooses_the_scorer(built, monkeypatch, tmp_path):
    built(seed=2, size=100)
    monkeypatch.setenv("BM25_KERNEL", "numpy")
    assert BM25Index.load(tmp_path / "idx").kernel is None
    monkeypatch.setenv("BM25_KERNEL", "auto")
    assert BM25Index.load(tmp_path / "idx").kernel is not None
    monkeypatch.setenv("BM25_KERNEL", "fast")
    index = BM25Index.load(tmp_path / "idx")
    with pytest.raises(ValueError, match="BM25_KERNEL='fast': use auto, numba, numpy"):
        index.search("w1x")


@pytest.fixture
def without_numba(monkeypatch):
    """A process where `import numba` fails, with nothing of the kernel loaded yet."""
    monkeypatch.setitem(sys.modules, "numba", None)  # makes the import raise ImportError
    monkeypatch.delitem(sys.modules, "harness_app.harness.retrieval._bm25_kernel", raising=False)
    monkeypatch.delattr(retrieval, "_bm25_kernel", raising=False)
    monkeypatch.setattr(kernel, "_loaded", {})


def test_numba_mode_without_numba_says_what_to_do(built, tmp_path, without_numba):
    built(seed=2, size=100)
    index = BM25Index.load(tmp_path / "idx", kernel="numba")
    expected = r"BM25_KERNEL=numba.*BM25_KERNEL=numpy"
    with pytest.raises(kernel.KernelUnavailableError, match=expected):
        index.search("w1x")


def test_auto_without_numba_ranks_with_numpy(built, tmp_path, without_numba, caplog):
    built(seed=2, size=100)
    index = BM25Index.load(tmp_path / "idx", kernel="auto")
    with caplog.at_level(logging.WARNING, logger=kernel.__name__):
        hits = index.search("w1x w2x", k=5)
    assert index.kernel is None
    assert as_pairs(hits) == as_pairs(index.search_exhaustive("w1x w2x", k=5))
    assert "compiled scorer is unavailable" in caplog.text


def test_warm_up_compiles_what_queries_use(built):
    from harness_app.harness.retrieval._bm25_kernel import compiled_exhaustive_top_k

    assert kernel.warm_up("numba") is True
    index = built(seed=9, size=200)
    index.search("w1x w2x", k=5)
    index.search("w1x w2x", k=5, exclude={"d1"})
    # One compilation serves the warm-up and real queries (read-only postings and all):
    # a worker that warmed up before forking never compiles again.
    assert len(compiled_exhaustive_top_k.signatures) == 1
    assert kernel.warm_up("numpy") is False


def test_the_three_term_lookups_agree(tmp_path, monkeypatch):
    """A small vocabulary read into a dict, the compiled hash search and NumPy's."""
    words = ["straße", "naïve", "東京", "w1x", "a", "zz" * 40, "δοκιμή"]
    docs = [Document(f"u{i}", "", " ".join(words[: i % len(words) + 1])) for i in range(50)]
    docs += generated_corpus(seed=3, size=300)
    BM25Index.build(docs, tmp_path / "idx", analysis=False)
    eager = BM25Index.load(tmp_path / "idx", kernel="numpy")
    assert eager.small_vocabulary() is not None  # read now, under the default limit
    monkeypatch.setattr(bm25_module, "_EAGER_VOCABULARY", 10)  # the others: too big to read
    compiled = BM25Index.load(tmp_path / "idx", kernel="numba")
    plain = BM25Index.load(tmp_path / "idx", kernel="numpy")
    assert compiled.small_vocabulary() is None and plain.small_vocabulary() is None
    vocabulary = list(compiled._terms)
    asked = vocabulary + ["absent", "w1", "w1xx", "", "東", "straß"]
    found = compiled._look_up_rows(asked)
    assert found == plain._look_up_rows(asked) == eager._look_up_rows(asked)
    assert [found[term][2] for term in vocabulary] == list(range(len(vocabulary)))
    assert found["absent"] == found["w1xx"] == found[""] == (0, 0, -1)
    query = "straße naïve w1x w3x absent"
    assert as_pairs(compiled.search(query)) == as_pairs(eager.search(query))


def test_term_lookup_compares_strings_after_a_hash_collision():
    """Two strings with one 64-bit hash: the lookup tells them apart by their bytes."""
    import numpy as np

    from harness_app.harness.retrieval._bm25_kernel import compiled_term_rows

    strings = [b"apple", b"melon", b"plum"]  # rows 0, 1, 2; "apple" and "melon" collide
    hashes = np.array([7, 7, 9], np.uint64)  # sorted; order gives each one's row
    order = np.array([0, 1, 2], np.int64)
    offsets = np.array([0, 5, 10, 14], np.int64)
    blob = np.frombuffer(b"".join(strings), np.uint8)
    indptr = np.array([0, 3, 5, 9], np.int64)
    asked = [b"melon", b"apple", b"grape", b"plum"]
    wanted = np.array([7, 7, 7, 9], np.uint64)
    encoded = np.frombuffer(b"".join(asked), np.uint8)
    bounds = np.array([0, 5, 10, 15, 19], np.int64)
    found = compiled_term_rows(hashes, order, offsets, blob, indptr, wanted, encoded, bounds)
    assert found.tolist() == [[3, 5, 1], [0, 3, 0], [0, 0, -1], [5, 9, 2]]


def test_the_cli_names_a_bad_bm25_kernel(tmp_path, monkeypatch, capsys):
    from harness_app.harness.cli import main

    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "a", "title": "A", "text": "alpha beta"}\n')
    (data / "queries.jsonl").write_text('{"_id": "q", "text": "alpha"}\n')
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    monkeypatch.setenv("BM25_KERNEL", "fast")
    code = main(["eval", str(data), "--index-dir", str(tmp_path / "idx")])
    assert code != 0
    assert "BM25_KERNEL='fast': use auto, numba, numpy" in capsys.readouterr().err
