"""Dense and hybrid retrievers over a BM25 index and its embeddings.

Harness-1 searches with a hybrid: BM25's top 25 and dense KNN's top 25, both leaving out
the documents earlier searches returned, fused by reciprocal-rank fusion and cut to 50, of
which the top ones are shown. `HybridRetriever` does exactly that; `DenseRetriever` is the
dense half on its own. Both serve documents from the BM25 index's store, so every
retriever of a corpus shows the same documents (and the same stored analyses).

`RETRIEVERS` names the three choices a policy config, the CLI and the web app offer;
`retriever_open` turns a name and an opened BM25 index into the retriever.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from typing import Any

from harness_app.harness.retrieval.ann import HnswIndex, ann_mode, wants_graph
from harness_app.harness.retrieval.bm25 import BM25Index
from harness_app.harness.retrieval.dense import DenseIndex, DenseIndexError
from harness_app.harness.retrieval.encoder import Encoder, FloatMatrix, default_encoder
from harness_app.harness.retrieval.fusion import reciprocal_rank_fusion
from harness_app.harness.types import Document, Retriever, SearchHit

BM25 = "bm25"
DENSE = "dense"
HYBRID = "hybrid"
RETRIEVERS: tuple[str, ...] = (BM25, DENSE, HYBRID)

HYBRID_DEPTH = 25  # hits taken from each list (Harness-1)
HYBRID_LIMIT = 50  # fused list length (Harness-1)
_QUERY_CACHE = 1024  # query vectors kept: GRPO samples of a question repeat its searches

# Builds the embeddings when they are missing: (bm25 index, encoder) -> dense index.
DenseBuilder = Callable[[BM25Index, Encoder], DenseIndex]


class _DocumentsOf:
    """The document side of the Retriever protocol, served by the BM25 index."""

    def __init__(self, bm25: BM25Index) -> None:
        self.bm25 = bm25

    def document(self, doc_id: str) -> Document:
        return self.bm25.document(doc_id)

    def document_analysis(self, doc: Document) -> Any:
        return self.bm25.document_analysis(doc)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.bm25

    def __len__(self) -> int:
        return len(self.bm25)

    def iter_documents(self) -> Iterator[Document]:
        return self.bm25.iter_documents()


class DenseRetriever(_DocumentsOf):
    """KNN by cosine over the corpus's embeddings; the query is encoded on each search."""

    def __init__(self, bm25: BM25Index, dense: DenseIndex, encoder: Encoder) -> None:
        super().__init__(bm25)
        if dense.encoder_name != encoder.name:
            raise DenseIndexError(
                f"embeddings by {dense.encoder_name!r} cannot be searched with {encoder.name!r}"
            )
        self.dense = dense
        self.encoder = encoder
        self._vectors: OrderedDict[str, FloatMatrix] = OrderedDict()
        self._lock = threading.Lock()

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        if k <= 0 or not query.strip():
            return []
        found = self.dense.search(self.query_vector(query), k, exclude)
        return [SearchHit(doc_id=d, score=s, rank=i) for i, (d, s) in enumerate(found, 1)]

    def query_vector(self, query: str) -> FloatMatrix:
        with self._lock:
            vector = self._vectors.get(query)
            if vector is not None:
                self._vectors.move_to_end(query)
                return vector
        vector = self.encoder.encode([query])[0]
        with self._lock:
            self._vectors[query] = vector
            if len(self._vectors) > _QUERY_CACHE:
                self._vectors.popitem(last=False)
        return vector


class HybridRetriever(_DocumentsOf):
    """BM25 top `depth` + dense top `depth`, fused by RRF (k=60) and cut to `limit`.

    Asked for more than `limit` hits (an evaluation at depth 100), it takes k from each
    list and fuses to k, so recall@k stays comparable with the single retrievers.
    """

    def __init__(
        self,
        bm25: BM25Index,
        dense: DenseRetriever,
        *,
        depth: int = HYBRID_DEPTH,
        limit: int = HYBRID_LIMIT,
        rrf_k: int = 60,
    ) -> None:
        super().__init__(bm25)
        self.dense = dense
        self.depth, self.limit, self.rrf_k = depth, limit, rrf_k

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        if k <= 0:
            return []
        depth = max(self.depth, k) if k > self.limit else self.depth
        lists = [self.bm25.search(query, depth, exclude), self.dense.search(query, depth, exclude)]
        fused = reciprocal_rank_fusion(lists, k=self.rrf_k, limit=max(self.limit, k))
        return fused[:k]


def retriever_open(
    kind: str,
    bm25: BM25Index,
    *,
    encoder: Encoder | None = None,
    build: DenseBuilder | None = None,
    ann: str | None = None,
    graph_progress: Callable[[int, int], None] | None = None,
) -> Retriever:
    """The `kind` retriever over `bm25`. Dense and hybrid open the embeddings in the
    index's folder; when they are missing or stale, `build` makes them if given, else the
    DenseIndexError says what is wrong. EncoderUnavailableError when the encoder's
    packages are not installed.

    `ann` (exact, hnsw or auto; default: the DENSE_ANN environment variable, else exact)
    chooses exact KNN or an HNSW graph (ann.py), built beside the embeddings on first use
    (`graph_progress` is called with rows inserted and rows in all meanwhile).
    BM25_KERNEL is checked here too (ValueError, KernelUnavailableError: kernel.py).
    """
    mode = ann_mode(ann)
    bm25.choose_kernel()  # a bad BM25_KERNEL fails here, not on the first search
    if kind == BM25:
        return bm25
    if kind not in RETRIEVERS:
        raise ValueError(f"unknown retriever {kind!r}; known: {', '.join(RETRIEVERS)}")
    encoder = encoder or default_encoder()
    try:
        dense = DenseIndex.load(
            bm25.directory, encoder_name=encoder.name, content_hash=bm25.content_hash
        )
    except DenseIndexError:
        if build is None:
            raise
        dense = build(bm25, encoder)
    if wants_graph(mode, len(dense)):
        dense.ann = HnswIndex.ensure(dense, progress=graph_progress)
    knn = DenseRetriever(bm25, dense, encoder)
    return knn if kind == DENSE else HybridRetriever(bm25, knn)


def dense_build(bm25: BM25Index, encoder: Encoder) -> DenseIndex:
    """Embed every document of `bm25` beside it (the CLI's builder; no progress)."""
    return DenseIndex.build(
        bm25.directory,
        bm25.iter_documents(),
        encoder,
        count=len(bm25),
        content_hash=bm25.content_hash,
    )
