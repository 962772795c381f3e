"""A reranking stage over any retriever: the inner retriever's top `depth` hits, reordered
by a cross-encoder served behind vLLM's rerank or score API (Harness-1 reranks its hits).

- `/rerank` (Jina/Cohere style): {model, query, documents, top_n} answers
  results[{index, relevance_score}];
- `/score`: {model, text_1: query, text_2: documents} answers data[{index, score}].

The first call tries /rerank and, when the server has no such route (404, 405), /score; the
endpoint that answered is kept for the rest of the episode. A server that has neither, or
fails, raises `RerankerError` (a `ServiceError` naming the URL): the episode ends with it.
Each document is sent as its title and the first `doc_chars` characters of its text. Hits
the reranker did not score (beyond `top_n`) keep their inner order after the scored ones.
Everything but `search` is the inner retriever's, `document_analysis` included.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from harness_app.harness.types import Document, JSONObject, Retriever, SearchHit, ServiceError

DEPTH = 50
DOC_CHARS = 2000
_NO_ROUTE = (404, 405)


class RerankerError(ServiceError):
    """The reranker's server failed: reason `reranker_unreachable` or `reranker_error`."""


@dataclass
class RerankStats:
    """What the reranker did in this process: calls, their latency, the endpoint used."""

    calls: int = 0
    latency_ms: float = 0.0
    endpoint: str = ""


class RerankingRetriever:
    """A `Retriever` whose `search` reranks the inner retriever's top `depth` hits."""

    def __init__(
        self,
        inner: Retriever,
        base_url: str,
        model: str,
        *,
        depth: int = DEPTH,
        doc_chars: int = DOC_CHARS,
        timeout_s: float = 60.0,
        api_key: str = "EMPTY",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not model:
            raise ValueError("a reranker needs a model name")
        if depth < 1:
            raise ValueError(f"rerank depth must be at least 1, got {depth}")
        self.inner = inner
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.depth = depth
        self.doc_chars = doc_chars
        self.stats = RerankStats()
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    # --- the Retriever protocol -------------------------------------------------------------

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        if k <= 0:
            return []
        hits = self.inner.search(query, k=max(k, self.depth), exclude=exclude)
        if len(hits) <= 1:
            return hits[:k]
        head = hits[: self.depth]
        texts = [self._text(hit.doc_id) for hit in head]
        scores = self._scores(query, texts)
        scored = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        order = [i for i, _ in scored] + [i for i in range(len(head)) if i not in scores]
        ranked = [(head[i].doc_id, scores.get(i, float("-inf"))) for i in order]
        ranked += [(hit.doc_id, float("-inf")) for hit in hits[self.depth :]]
        return [
            SearchHit(doc_id, score, rank) for rank, (doc_id, score) in enumerate(ranked[:k], 1)
        ]

    def document(self, doc_id: str) -> Document:
        return self.inner.document(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    def iter_documents(self) -> Iterator[Document]:
        return self.inner.iter_documents()

    def __getattr__(self, name: str) -> Any:
        # Optional capabilities of the inner retriever (document_analysis, directory, ...).
        if name == "inner":  # not set yet (during __init__): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # --- the server -------------------------------------------------------------------------

    def _text(self, doc_id: str) -> str:
        doc = self.inner.document(doc_id)
        return (
            f"{doc.title}\n{doc.text[: self.doc_chars]}"
            if doc.title
            else doc.text[: self.doc_chars]
        )

    def _scores(self, query: str, texts: list[str]) -> dict[int, float]:
        """Index into `texts` → relevance score, from whichever endpoint answers."""
        endpoints = [self.stats.endpoint] if self.stats.endpoint else ["rerank", "score"]
        refused: list[str] = []
        for endpoint in endpoints:
            response = self._post(endpoint, _body(endpoint, self.model, query, texts))
            if response.status_code in _NO_ROUTE and not self.stats.endpoint:
                refused.append(f"/{endpoint} answered {response.status_code}")
                continue
            if response.status_code >= 400:
                raise RerankerError(
                    "reranker_error",
                    f"reranker at {self.base_url}/{endpoint} answered HTTP "
                    f"{response.status_code}: {response.text[:500]}",
                )
            scores = _parse(endpoint, response, len(texts))
            if scores is None:
                raise RerankerError(
                    "reranker_error",
                    f"reranker at {self.base_url}/{endpoint}: the answer is not a {endpoint} "
                    f"result list with an index and a score for each document: "
                    f"{response.text[:300]}",
                )
            self.stats.endpoint = endpoint
            return scores
        raise RerankerError(
            "reranker_error",
            f"reranker at {self.base_url} serves neither /rerank nor /score "
            f"({'; '.join(refused)}); is {self.model!r} served as a reranking "
            "(cross-encoder) model?",
        )

    def _post(self, endpoint: str, body: dict[str, Any]) -> httpx.Response:
        started = time.perf_counter()
        try:
            return self._http.post(f"/{endpoint}", json=body)
        except httpx.TimeoutException as exc:
            raise RerankerError(
                "reranker_unreachable",
                f"reranker at {self.base_url}/{endpoint} timed out: {exc or 'no answer'}",
            ) from exc
        except httpx.TransportError as exc:
            raise RerankerError(
                "reranker_unreachable", f"reranker at {self.base_url}/{endpoint} unreachable: {exc}"
            ) from exc
        finally:
            self.stats.calls += 1
            self.stats.latency_ms += (time.perf_counter() - started) * 1000


def _body(endpoint: str, model: str, query: str, texts: list[str]) -> JSONObject:
    if endpoint == "rerank":
        return {"model": model, "query": query, "documents": [*texts], "top_n": len(texts)}
    return {"model": model, "text_1": query, "text_2": [*texts]}


def _parse(endpoint: str, response: httpx.Response, count: int) -> dict[int, float] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    key, score_key = ("results", "relevance_score") if endpoint == "rerank" else ("data", "score")
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        return None
    scores: dict[int, float] = {}
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get(score_key) if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count:
            return None
        if isinstance(score, bool) or not isinstance(score, int | float):
            return None
        scores[index] = float(score)
    return scores
