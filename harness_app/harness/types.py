"""Value types shared by every part of the harness.

These are the contracts between retrieval, the environment, the policies and the Django
apps that persist episodes. They are plain dataclasses so they serialise to JSON without
ceremony and cost nothing to construct on the hot path.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, TypedDict, TypeVar, runtime_checkable

CallT = TypeVar("CallT")

# One name for a JSON value (as healthchecks' hc/lib/typealias.py does): the shapes that go
# over the wire, into a JSON file or a JSONField, in place of `dict[str, Any]`.
JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class SearchHit:
    doc_id: str
    score: float
    rank: int  # 1-based position in the result list


@runtime_checkable
class Retriever(Protocol):
    """Ranked retrieval over one corpus, plus random access to its documents."""

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        """Top-k hits for `query`, never returning an id in `exclude`."""
        ...

    def document(self, doc_id: str) -> Document:
        """The stored document; raises KeyError for an unknown id."""
        ...

    def __contains__(self, doc_id: object) -> bool: ...

    def __len__(self) -> int: ...

    def iter_documents(self) -> Iterator[Document]:
        """Every document in corpus order (used by grep_corpus, which bounds its own work)."""
        ...


@dataclass(frozen=True, slots=True)
class QuerySpec:
    """One question an episode works on, with its relevance judgements.

    `qrels` maps doc id to grade: 2 = answer-bearing, 1 = other supporting evidence.
    A policy never sees the qrels; the environment uses them only for metrics.
    `answers` holds every gold answer the reader is scored against (the answer and its
    aliases, `answers.query_answers`); empty means just `answer`.
    """

    query_id: str
    text: str
    answer: str = ""
    qrels: dict[str, int] = field(default_factory=dict)
    answers: tuple[str, ...] = ()

    @property
    def gold_answers(self) -> tuple[str, ...]:
        if self.answers:
            return self.answers
        return (self.answer,) if self.answer.strip() else ()

    @property
    def relevant(self) -> frozenset[str]:
        return frozenset(d for d, g in self.qrels.items() if g >= 1)

    @property
    def answer_docs(self) -> frozenset[str]:
        return frozenset(d for d, g in self.qrels.items() if g >= 2)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation as a policy produced it.

    `arguments` is whatever the policy emitted: a dict when it parsed, or the raw string
    when it did not. The environment validates it and never raises on bad input.
    """

    name: str
    arguments: dict[str, Any] | str
    call_id: str = ""

    def to_json(self) -> ToolCallJson:
        return {"name": self.name, "arguments": self.arguments, "call_id": self.call_id}


class ToolCallJson(TypedDict):
    """A ToolCall as turn records and Turn rows keep it."""

    name: str
    arguments: dict[str, Any] | str
    call_id: str


@dataclass(slots=True)
class ToolResult:
    call_id: str
    name: str
    content: str  # exactly the text the model sees for this call
    ok: bool = True  # False means a format error (unknown tool, bad arguments, unknown id)
    error: str = ""

    def to_json(self) -> ToolResultJson:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "content": self.content,
            "ok": self.ok,
            "error": self.error,
        }


class ToolResultJson(TypedDict):
    """A ToolResult as turn records and Turn rows keep it."""

    call_id: str
    name: str
    content: str
    ok: bool
    error: str


# Reasons the harness cut an episode short of the agent's own end: a budget ran out.
TRUNCATING_REASONS = frozenset({"max_turns", "context_budget"})


@dataclass(slots=True)
class Observation:
    """What `reset` and `step` return.

    `text` is the whole observation as the model sees it this turn: the tool results followed
    by the rendered WORKINGMEMORY. As in gymnasium, `terminated` is set when the episode
    ended by the agent's own doing (end_search, or repeated format errors) and `truncated`
    when a budget cut it (max_turns, context_budget: `TRUNCATING_REASONS`);
    `termination_reason` says which, and `done` is either.
    """

    turn: int
    text: str
    tool_results: list[ToolResult]
    working_memory: str
    terminated: bool = False
    truncated: bool = False
    termination_reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def ending(done: bool, reason: str) -> tuple[bool, bool]:
    """(terminated, truncated) of an episode in this state."""
    truncated = done and reason in TRUNCATING_REASONS
    return done and not truncated, truncated


@runtime_checkable
class CallRecorder(Protocol[CallT]):
    """Something that calls an outside model (an LLM policy, an LLM verifier) and keeps a
    record of each call until it is taken: the runner puts them on the turn's record."""

    def take_calls(self) -> list[CallT]:
        """The calls made since the last take, oldest first."""
        ...


@runtime_checkable
class Closeable(Protocol):
    """A service with connections to release (an LLM verifier, a reranker)."""

    def close(self) -> None: ...


class ServiceError(RuntimeError):
    """An outside service a harness mechanism calls (an LLM verifier, a reranker) failed.

    Raised out of `SearchHarness.step`; the runner ends the episode on it, with `reason` as
    the termination reason and the message (which names the service's URL) as its error.
    It is not a tool failure: the policy did nothing wrong and must not pay a turn for it.
    """

    reason: str = "service_error"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
