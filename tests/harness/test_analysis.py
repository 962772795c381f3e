"""The per-document analysis stored with the index gives exactly what computing it gives.

Two harnesses run the same episodes over the same BM25 index, one reading the stored
analysis, one computing it (the index behind a wrapper without `document_analysis`); every
observation and the final state must be identical. Per document, the stored parts must
equal the computed ones, and the sentence ranking must be rank-bm25's own.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from harness_app.harness.analysis import ComputedAnalysis
from harness_app.harness.compress import (
    render,
    sentence_view,
    sentences_of,
    top_sentence_indices,
    weights_of,
)
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.retrieval import BM25Index, StaleIndexError, open_index
from harness_app.harness.retrieval import cache as index_cache
from harness_app.harness.retrieval.builder import FORMAT_VERSION
from harness_app.harness.text import analyze
from harness_app.harness.types import Document, QuerySpec, SearchHit, ToolCall
from tests.harness.fakes import DOCS, QUESTION

QUERIES = [
    "Analytical Engine Babbage program",
    "punched cards loom",
    "who translated the Italian paper",
    "Turing Bletchley Park bombe",
    "museum London Difference Engine",
]


class Computing:
    """The index's retrieval, without its stored analysis: the harness computes it."""

    def __init__(self, index: BM25Index) -> None:
        self.index = index

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        return self.index.search(query, k, exclude)

    def document(self, doc_id: str) -> Document:
        return self.index.document(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.index

    def __len__(self) -> int:
        return len(self.index)

    def iter_documents(self) -> Iterator[Document]:
        return self.index.iter_documents()


def rank_bm25_indices(doc: Document, query: str, k: int) -> list[int]:
    """The ranking as compress.py computed it before the analysis was stored."""
    sentences = sentences_of(doc)
    if len(sentences) <= k:
        return list(range(len(sentences)))
    terms = [analyze(s) for s in sentences]
    if not any(terms):
        return list(range(k))
    bm25 = BM25Okapi(terms)
    query_terms = [t for t in analyze(query) if t in bm25.idf]
    if not query_terms:
        return list(range(k))
    scores = bm25.get_scores(query_terms)
    ranked = sorted(range(len(sentences)), key=lambda i: (-float(scores[i]), i))
    return sorted(ranked[:k])


def assert_weights_are_rank_bm25s(docs: list[Document]) -> None:
    """Every (term, sentence) weight equals BM25Okapi.get_scores([term]) there, exactly."""
    for doc in docs:
        terms = [list(t) for t in sentence_view(doc).terms]
        table = weights_of(terms)
        if not any(terms):
            assert table.rows == {}
            continue
        bm25 = BM25Okapi(terms)
        assert list(table.rows) == list(bm25.idf)  # every term, in rank-bm25's order
        for term, row in table.rows.items():
            expected = bm25.get_scores([term])
            span = range(table.indptr[row], table.indptr[row + 1])
            got = {table.sentences[j]: table.weights[j] for j in span}
            assert got == {i: float(v) for i, v in enumerate(expected) if term in terms[i]}


def assert_same_analysis(index: BM25Index, docs: list[Document], queries: list[str]) -> int:
    """Stored == computed for every document; returns how many had a stored analysis."""
    stored_count = 0
    for doc in docs:
        stored = index.document_analysis(index.document(doc.doc_id))
        if stored is None:
            continue
        stored_count += 1
        computed = ComputedAnalysis(doc)
        assert stored.fingerprint() == computed.fingerprint(), doc.doc_id
        assert stored.entities() == computed.entities(), doc.doc_id
        view, expected = stored.sentence_view(), computed.sentence_view()
        assert view.sentences == expected.sentences, doc.doc_id
        assert [set(t) for t in view.terms] == [set(t) for t in expected.terms], doc.doc_id
        for query, k in itertools.product(queries, (1, 2, 4)):
            assert stored.compressed(query, k, 300) == computed.compressed(query, k, 300)
            reference = render(expected.sentences, rank_bm25_indices(doc, query, k), 300)
            assert computed.compressed(query, k, 300) == reference, (doc.doc_id, query, k)
            assert top_sentence_indices(doc, query, k) == rank_bm25_indices(doc, query, k)
    return stored_count


def scripted_calls(question: str, rng: random.Random, env: SearchHarness) -> list[ToolCall]:
    """Every tool, with arguments drawn from the question and what was shown."""
    words = [w for w in re.findall(r"[A-Za-z0-9']+", question) if len(w) > 3] or ["engine"]
    shown = list(env.state.memory)
    some = rng.sample(shown, min(3, len(shown))) or ["nothing"]
    if env.state.turn == 0:
        return [ToolCall("search_corpus", {"query": question})]
    choice = rng.randrange(7)
    if choice == 0:
        queries = [" ".join(rng.sample(words, min(2, len(words)))) for _ in range(3)]
        return [ToolCall("fan_out_search", {"queries": queries})]
    if choice == 1:
        return [ToolCall("search_corpus", {"query": " ".join(rng.sample(words, 1))})]
    if choice == 2:
        return [ToolCall("review_docs", {"doc_ids": some})]
    if choice == 3:
        claim = " ".join(rng.sample(words, min(3, len(words))))
        return [ToolCall("verify", {"claim": claim, "doc_ids": some[:2]})]
    if choice == 4:
        return [ToolCall("curate", {"add_ids": some, "importance": {some[0]: "high"}})]
    if choice == 5:
        return [ToolCall("read_document", {"doc_id": some[0]})]
    return [ToolCall("grep_corpus", {"pattern": re.escape(rng.choice(words))})]


def assert_same_episodes(index: BM25Index, questions: list[QuerySpec], steps: int) -> None:
    config = HarnessConfig(max_turns=steps + 1)
    for n, question in enumerate(questions):
        observations = []
        for retriever in (index, Computing(index)):
            rng = random.Random(n)
            env = SearchHarness(retriever, config=config)
            texts = [env.reset(question).text]
            for _ in range(steps):
                obs = env.step(scripted_calls(question.text, rng, env))
                texts.append(obs.text)
                if obs.done:
                    break
            observations.append((texts, json.dumps(env.state.to_json(), sort_keys=True)))
        stored, computed = observations
        assert stored[0] == computed[0], question.query_id
        assert stored[1] == computed[1], question.query_id


@pytest.fixture
def fake_index(tmp_path) -> BM25Index:
    return BM25Index.build(DOCS, tmp_path / "idx")


def test_sentence_weights_are_rank_bm25s_to_the_bit():
    odd = [Document("o", "", "The the the. A cat. The cat sat. Cat cat cat. Dog.")]
    assert_weights_are_rank_bm25s([*DOCS, *odd])


def test_stored_analysis_equals_computed_on_the_fake_corpus(fake_index):
    assert assert_same_analysis(fake_index, list(DOCS), QUERIES) == len(DOCS)


def test_episodes_are_identical_with_stored_or_computed_analysis(fake_index):
    questions = [QUESTION] + [QuerySpec(f"q{i}", q) for i, q in enumerate(QUERIES)]
    assert_same_episodes(fake_index, questions, steps=12)
    # The near-duplicate pair is found through the stored fingerprints too.
    env = SearchHarness(fake_index)
    env.reset(QUESTION)
    text = env.step([ToolCall("search_corpus", {"query": "Analytical Engine mill store"})]).text
    assert "Analytical_Engine_copy≈Analytical_Engine" in text


def test_a_document_the_store_cannot_hold_is_computed_instead(tmp_path):
    odd = Document("odd", "Odd", 'He sang "Rock\x1earound" with Grace Hopper in New York City.')
    index = BM25Index.build([*DOCS, odd], tmp_path / "idx")
    assert index.manifest["analysis_skipped"] == 1
    assert index.document_analysis(index.document("odd")) is None
    assert assert_same_analysis(index, list(DOCS), QUERIES[:1]) == len(DOCS)
    env = SearchHarness(index)
    env.reset(QUESTION)
    env.step([ToolCall("search_corpus", {"query": "sang Rock around Hopper"})])
    assert env.state.graph.entities["rock around"].label == "Rock\x1earound"  # computed


def test_a_retrieval_only_index_leaves_the_analysis_to_the_harness(tmp_path):
    index = BM25Index.build(DOCS, tmp_path / "idx", analysis=False)
    assert index.manifest["analysis"] is None
    assert index.document_analysis(index.document("Ada_Lovelace")) is None
    assert not list(tmp_path.glob("idx/analysis.*"))
    assert_same_episodes(index, [QUESTION], steps=6)


def test_an_index_of_the_previous_format_is_stale_and_rebuilt(tmp_path):
    index_cache.forget_open_indexes()
    try:
        index = open_index(lambda: DOCS, tmp_path / "cache")
        manifest_path = index.directory / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        manifest_path.write_text(json.dumps({**manifest, "version": 1}))
        with pytest.raises(
            StaleIndexError, match=f"format version 1, this code reads {FORMAT_VERSION}"
        ):
            BM25Index.load(index.directory)
        manifest_path.write_text(json.dumps({**manifest, "analysis": "doc-analysis-0"}))
        with pytest.raises(StaleIndexError, match="stores document analysis 'doc-analysis-0'"):
            BM25Index.load(index.directory)
        index_cache.forget_open_indexes()
        rebuilt = open_index(lambda: DOCS, tmp_path / "cache")
        assert rebuilt.manifest["analysis"] == manifest["analysis"]
        assert rebuilt.document_analysis(rebuilt.document("Ada_Lovelace")) is not None
    finally:
        index_cache.forget_open_indexes()


def _hotpotqa(path: Path, docs: int, questions: int) -> tuple[list[Document], list[QuerySpec]]:
    with (path / "corpus.jsonl").open() as fh:
        rows = [json.loads(line) for line in itertools.islice(fh, docs)]
    with (path / "queries.jsonl").open() as fh:
        queries = [json.loads(line) for line in itertools.islice(fh, questions)]
    return (
        [Document(r["_id"], r["title"], r["text"]) for r in rows],
        [QuerySpec(q["_id"], q["text"]) for q in queries],
    )


def test_stored_analysis_equals_computed_on_hotpotqa(hotpotqa_dir, tmp_path):
    """Skipped, saying so, when ../shared/data/hotpotqa-dev500 is absent."""
    docs, questions = _hotpotqa(hotpotqa_dir, docs=1500, questions=6)
    index = BM25Index.build(docs, tmp_path / "idx")
    rng = random.Random(3)
    sample = rng.sample(docs, 150)
    queries = [q.text for q in questions] + [d.title for d in rng.sample(docs, 4)]
    assert assert_same_analysis(index, sample, queries) == len(sample)
    assert_weights_are_rank_bm25s(sample)
    assert_same_episodes(index, questions, steps=15)
