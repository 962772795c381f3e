"""The pruned BM25 search returns exactly what scoring every document returns.

`BM25Index.search` skips documents that cannot reach the top k (pruning.py); these tests
compare it with `search_exhaustive`, which ranks every matching document, on generated
corpora and random queries: same ids, same scores to the bit, same tie order, with
exclusions and every k from 1 to 100. They also check that pruning really happens, and
that an index of the previous format is rebuilt rather than read.
"""

from __future__ import annotations

import json
import random

import pytest

from harness_app.harness.retrieval import BM25Index, StaleIndexError, open_index, pruning
from harness_app.harness.retrieval import bm25 as bm25_module
from harness_app.harness.retrieval import cache as index_cache
from harness_app.harness.retrieval.builder import FORMAT_VERSION, MANIFEST
from harness_app.harness.types import Document, SearchHit

VOCAB = [f"w{i}x" for i in range(400)]
ZIPF = [1 / (i + 1) ** 1.1 for i in range(400)]


def generated_corpus(seed: int, size: int) -> list[Document]:
    """Zipf-distributed words, lengths 0 to 120, and a share of exact duplicates (ties)."""
    rng = random.Random(seed)
    docs: list[Document] = []
    for i in range(size):
        if docs and rng.random() < 0.1:
            text = rng.choice(docs).text  # same text, same score: ties to break by position
        else:
            text = " ".join(rng.choices(VOCAB, ZIPF, k=rng.randint(0, 120)))
        docs.append(Document(f"d{i}", "", text))
    return docs


def random_query(rng: random.Random) -> str:
    # Mostly common words (long rows, worth pruning), some rare ones, sometimes repeated.
    words = rng.choices(VOCAB, ZIPF, k=rng.randint(1, 14))
    words += rng.sample(VOCAB[200:], k=rng.randint(0, 2))
    if rng.random() < 0.3:
        words.append(words[0])
    return " ".join(words)


def as_pairs(hits: list[SearchHit]) -> list[tuple[str, float, int]]:
    return [(h.doc_id, h.score, h.rank) for h in hits]


@pytest.fixture
def always_prune(monkeypatch):
    """Prune every query, however few postings it has, and count how often it pruned."""
    monkeypatch.setattr(bm25_module, "_PRUNE_ABOVE", 0)
    counts = {"calls": 0, "pruned": 0}
    real = pruning.candidates

    def counting(postings, rows, k, excluded, acc):
        found = real(postings, rows, k, excluded, acc)
        counts["calls"] += 1
        counts["pruned"] += found is not None
        return found

    monkeypatch.setattr(bm25_module, "candidates", counting)
    return counts


def assert_same_as_exhaustive(index: BM25Index, queries: int, seed: int) -> None:
    rng = random.Random(seed)
    for trial in range(queries):
        query = random_query(rng)
        k = rng.randint(1, 100)
        full = index.search_exhaustive(query, k=200)
        # Exclude some of the best documents, and some random ones (and an unknown id).
        exclude: set[str] = set()
        if trial % 2:
            exclude = {h.doc_id for h in full[: rng.randint(1, 30)]}
            exclude |= {f"d{rng.randrange(len(index))}" for _ in range(20)} | {"not-an-id"}
        expected = index.search_exhaustive(query, k=k, exclude=exclude)
        got = index.search(query, k=k, exclude=exclude)
        assert as_pairs(got) == as_pairs(expected), (query, k, sorted(exclude))
        assert not exclude & {h.doc_id for h in got}


@pytest.mark.parametrize(("k1", "b"), [(0.9, 0.4), (1.2, 0.75), (2.0, 1.0)])
def test_pruned_search_equals_exhaustive_scoring(tmp_path, always_prune, k1, b):
    docs = generated_corpus(seed=11, size=3000)
    index = BM25Index.build(docs, tmp_path / "idx", k1=k1, b=b, analysis=False)
    assert_same_as_exhaustive(index, queries=150, seed=5)
    # The comparison is only worth something if most queries were actually pruned.
    assert always_prune["calls"] == 150
    assert always_prune["pruned"] > 100


def test_sparse_paths_agree_too(tmp_path, always_prune, monkeypatch):
    """The same check with the gather-at-each-posting paths instead of dense scans."""
    monkeypatch.setattr(pruning, "_DENSE_RATIO", 0)
    monkeypatch.setattr(bm25_module, "_DENSE_RATIO", 0)
    docs = generated_corpus(seed=12, size=3000)
    index = BM25Index.build(docs, tmp_path / "idx", analysis=False)
    assert_same_as_exhaustive(index, queries=80, seed=6)
    assert always_prune["pruned"] > 50


def test_pruning_ranks_far_fewer_documents_than_match(tmp_path, monkeypatch):
    docs = generated_corpus(seed=3, size=3000)
    index = BM25Index.build(docs, tmp_path / "idx", analysis=False)
    query = " ".join(VOCAB[:12])  # the commonest words: most documents match
    rows = index._query_rows(query)
    acc = index._buffer()
    found = pruning.candidates(index._postings, rows, 10, None, acc)
    matching = len(index.search_exhaustive(query, k=len(docs)))
    assert found is not None and len(found) < matching / 10
    assert not acc.any()  # the shared scratch is left all-zero for the next query


def test_ties_keep_corpus_order_when_pruned(tmp_path, always_prune):
    common = " ".join(VOCAB[:30])
    docs = [Document(f"t{i}", "", common) for i in range(200)]
    docs += [Document(f"u{i}", "", " ".join(VOCAB[:15])) for i in range(200)]
    index = BM25Index.build(docs, tmp_path / "idx", analysis=False)
    for k in (1, 7, 50, 100):
        hits = index.search(" ".join(VOCAB[:20]), k=k, exclude={"t0", "t5"})
        expected = [f"t{i}" for i in range(200) if i not in (0, 5)][:k]
        assert [h.doc_id for h in hits] == expected


def test_an_index_of_the_previous_format_is_stale_and_rebuilt(tmp_path):
    docs = generated_corpus(seed=1, size=50)
    index_cache.forget_open_indexes()
    try:
        index = open_index(lambda: docs, tmp_path / "cache")
        manifest_path = index.directory / MANIFEST
        manifest = json.loads(manifest_path.read_text())
        manifest["version"] = FORMAT_VERSION - 1
        manifest_path.write_text(json.dumps(manifest))
        (index.directory / "postings.max.npy").unlink()  # as a version-2 index lacks it
        with pytest.raises(StaleIndexError, match="format version"):
            BM25Index.load(index.directory)
        index_cache.forget_open_indexes()
        rebuilt = open_index(lambda: docs, tmp_path / "cache")
        assert rebuilt.manifest["version"] == FORMAT_VERSION
        assert (rebuilt.directory / "postings.max.npy").is_file()
        query = " ".join(VOCAB[:5])
        assert as_pairs(rebuilt.search(query)) == as_pairs(rebuilt.search_exhaustive(query))
    finally:
        index_cache.forget_open_indexes()
