"""A tiny in-memory Retriever for harness tests: rank-bm25 over handwritten documents.

The documents are written for these tests (early mechanical computing), with the features
the mechanisms need: a near-duplicate pair (Analytical_Engine / Analytical_Engine_copy),
entities shared across documents (Charles Babbage, Ada Lovelace, "Sketch of the
Analytical Engine"), and several long multi-sentence documents for compression.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from rank_bm25 import BM25Okapi

from harness_app.harness.ablation import Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.text import analyze
from harness_app.harness.types import Document, QuerySpec, SearchHit, ToolCall, ToolResult

_ENGINE_TEXT = (
    "The Analytical Engine was a proposed general-purpose mechanical computer designed by "
    "Charles Babbage. It was first described in 1837 as the successor to the Difference "
    "Engine. The design had an arithmetic unit called the mill and a memory called the "
    "store. Programs and data were to be supplied on punched cards borrowed from the "
    "Jacquard loom. The machine was never completed during the lifetime of its designer. "
    "Ada Lovelace published the first algorithm intended for the engine in her notes."
)

DOCS: tuple[Document, ...] = (
    Document(
        "Ada_Lovelace",
        "Ada Lovelace",
        "Ada Lovelace was an English mathematician and writer born in London in 1815. She "
        "is chiefly known for her work on the Analytical Engine of Charles Babbage. Her "
        'notes on the translated article "Sketch of the Analytical Engine" contain an '
        "algorithm for Bernoulli numbers. Many historians call it the first computer "
        "program. She died in 1852 at the age of thirty-six.",
    ),
    Document(
        "Charles_Babbage",
        "Charles Babbage",
        "Charles Babbage was an English polymath and mechanical engineer born in 1791. He "
        "originated the concept of a programmable digital computer. He designed the "
        "Difference Engine to tabulate polynomial functions. He later designed the "
        "Analytical Engine, a far more general machine. He held the Lucasian Chair of "
        "Mathematics at Trinity College in Cambridge. He died in London in 1871.",
    ),
    Document("Analytical_Engine", "Analytical Engine", _ENGINE_TEXT),
    Document(
        "Analytical_Engine_copy",
        "Analytical Engine (mirror)",
        _ENGINE_TEXT.replace("never completed", "never finished"),
    ),
    Document(
        "Difference_Engine",
        "Difference Engine",
        "A difference engine is an automatic mechanical calculator designed to tabulate "
        "polynomial functions. Charles Babbage began building one in 1822. The project was "
        "abandoned after a dispute with his engineer Joseph Clement. The Science Museum in "
        "London completed a working Difference Engine No. 2 in 1991.",
    ),
    Document(
        "Luigi_Menabrea",
        "Luigi Federico Menabrea",
        "Luigi Federico Menabrea was an Italian general and statesman who served as Prime "
        "Minister of Italy. In 1842 he wrote a paper on the Analytical Engine after hearing "
        'Babbage lecture in Turin. The paper, "Sketch of the Analytical Engine", was '
        "translated into English by Ada Lovelace. Her added notes were longer than the "
        "paper itself.",
    ),
    Document(
        "Jacquard_loom",
        "Jacquard machine",
        "The Jacquard machine is a device fitted to a loom that simplifies weaving textiles "
        "with complex patterns. It was invented by Joseph Marie Jacquard in 1804. Chains of "
        "punched cards control the pattern, one card per row. The punched cards inspired "
        "the input mechanism of the Analytical Engine.",
    ),
    Document(
        "Science_Museum_London",
        "Science Museum, London",
        "The Science Museum is a major museum on Exhibition Road in South Kensington, "
        "London. It was founded in 1857. Its collection includes a Difference Engine built "
        "from the original plans of Charles Babbage. The museum attracts more than 3,300,000 "
        "visitors a year.",
    ),
    Document(
        "Alan_Turing",
        "Alan Turing",
        "Alan Turing was an English mathematician and computer scientist born in 1912. He "
        "formalised the concepts of algorithm and computation with the Turing machine. "
        "During the Second World War he worked at Bletchley Park on breaking German "
        "ciphers. In a 1950 paper he answered what he called Lady Lovelace's objection. He "
        "died in 1954.",
    ),
    Document(
        "Bletchley_Park",
        "Bletchley Park",
        "Bletchley Park is an English country house in Milton Keynes that became the "
        "principal centre of Allied code-breaking during the Second World War. Alan Turing "
        "and Gordon Welchman designed the bombe there. The Colossus computer was operated "
        "there from 1944. It is now a heritage attraction.",
    ),
    Document(
        "Harvard_Mark_I",
        "Harvard Mark I",
        "The Harvard Mark I was an electromechanical computer completed in 1944. Howard "
        "Aiken conceived it after reading about the Analytical Engine of Charles Babbage. "
        "It was built by IBM and shipped to Harvard University. Grace Hopper was one of its "
        "first programmers.",
    ),
    Document(
        "Grace_Hopper",
        "Grace Hopper",
        "Grace Hopper was an American computer scientist and United States Navy rear "
        "admiral. She was one of the first programmers of the Harvard Mark I. She "
        "developed early compilers and contributed to the design of COBOL. She was born in "
        "New York City in 1906.",
    ),
    Document(
        "Punched_card",
        "Punched card",
        "A punched card is a piece of stiff paper that holds data as holes in fixed "
        "positions. Punched cards drove the Jacquard loom. Herman Hollerith used them for "
        "the United States census of 1890. IBM sold punched card equipment for decades.",
    ),
)


class FakeRetriever:
    """rank-bm25 over title + text; honours `exclude` and records every call."""

    def __init__(self, documents: Collection[Document] = DOCS) -> None:
        self._docs = {d.doc_id: d for d in documents}
        self._ids = list(self._docs)
        self._bm25 = BM25Okapi([analyze(f"{d.title} {d.text}") for d in self._docs.values()])
        self.calls: list[tuple[str, int, frozenset[str]]] = []

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        excluded = frozenset(exclude)
        self.calls.append((query, k, excluded))
        terms = analyze(query)
        if not terms:
            return []
        scores = self._bm25.get_scores(terms)
        ranked = sorted(range(len(self._ids)), key=lambda i: (-scores[i], i))
        kept = [i for i in ranked if scores[i] > 0 and self._ids[i] not in excluded][:k]
        return [SearchHit(self._ids[i], float(scores[i]), rank) for rank, i in enumerate(kept, 1)]

    def document(self, doc_id: str) -> Document:
        return self._docs[doc_id]

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def iter_documents(self) -> Iterator[Document]:
        return iter(self._docs.values())


QUESTION = QuerySpec(
    "q-lovelace",
    "Who translated the Italian paper on the engine designed by Charles Babbage?",
    answer="Ada Lovelace",
    qrels={"Ada_Lovelace": 2, "Luigi_Menabrea": 1},
)


def make_env(
    ablation: Ablation | None = None, retriever: FakeRetriever | None = None, **config: Any
) -> SearchHarness:
    """A harness over the fake corpus, already reset on QUESTION."""
    env = SearchHarness(
        retriever or FakeRetriever(), config=HarnessConfig(**config), ablation=ablation
    )
    env.reset(QUESTION)
    return env


def call(name: str, arguments: dict[str, Any] | str | None = None, call_id: str = "") -> ToolCall:
    return ToolCall(name, {} if arguments is None else arguments, call_id)


def step1(
    env: SearchHarness, name: str, arguments: dict[str, Any] | str | None = None
) -> ToolResult:
    """Run one single-call turn and return its result."""
    return env.step([call(name, arguments)]).tool_results[0]
