"""HarnessState: everything the harness remembers about one episode, as plain data.

The state is mutated in place by `SearchHarness.step` (no per-turn copies) and serialises to
a JSON-ready dict with `to_json`; `HarnessState.from_json` rebuilds an equal state, so a
persisted snapshot can be inspected or an episode resumed. Derived, rebuildable indexes
(the dedup LSH tables) live on the harness, not here.

Parts, in the paper's letters:

- P `pool`: every document whose content was shown, with its best retrieval score, first
  turn and the query that first found it.
- C `curated` with importance tags I, plus `curation_log`: the typed per-turn events
  (added / removed / evicted / retagged / refused) the UI renders as diffs.
- D `memory`: what the model was shown of each document (a capped snippet) and whether it
  read the full text; `review_docs` serves from here.
- G `graph`: the evidence graph (see graph.py).
- V `verifications`: structured claim/doc verdicts.
- H `searches`: one record per query or grep pattern.
- B `turns_used`, `tokens_used`: the budget. `turn` is the step index (every call of
  `step`, the numbering records and first-seen turns use); `turns_used` is the count that
  `max_turns` and the turn penalty read, which by default leaves out format-error turns
  and end_search-only turns (`HarnessConfig.count_every_step`).

`shown` maps every document id whose content was presented to the model (hit lists, reads,
grep hits; near-duplicate notes only with `HarnessConfig.hidden_duplicates_count_as_shown`)
to the turn it first appeared; the working memory only repeats ids already in it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from harness_app.harness.graph import EvidenceGraph
from harness_app.harness.types import JSONObject

IMPORTANCE_LEVELS: tuple[str, ...] = ("very_high", "high", "fair", "low")
IMPORTANCE_RANK: dict[str, int] = {"very_high": 3, "high": 2, "fair": 1, "low": 0}
CURATION_EVENT_KINDS = ("added", "removed", "evicted", "retagged", "refused")
VERDICTS = ("supported", "unsupported", "unclear")


@dataclass(slots=True)
class PoolEntry:
    doc_id: str
    title: str
    score: float  # best retrieval score seen; 0.0 for grep hits and direct reads
    first_turn: int
    query: str  # the query (or "grep:<pattern>", "read") that first surfaced it
    source: str  # search_corpus | fan_out_search | grep_corpus | read_document


@dataclass(slots=True)
class MemoryEntry:
    doc_id: str
    title: str
    snippet: str  # the view first shown (compressed sentences or leading text), capped
    first_turn: int
    read: bool = False  # the full text was shown by read_document


@dataclass(slots=True)
class CuratedItem:
    doc_id: str
    importance: str
    added_turn: int


@dataclass(slots=True)
class CurationEvent:
    """One change (or refused change) to the curated set.

    `detail` says why or from what: the previous tag for "retagged", the incoming doc for
    "evicted", the refusal reason for "refused", "auto_seed" for seeded adds.
    """

    turn: int
    kind: str
    doc_id: str
    importance: str
    detail: str = ""


@dataclass(slots=True)
class SearchRecord:
    turn: int
    tool: str
    query: str
    hit_ids: list[str]  # ids whose content was shown, in display order
    suppressed: list[str] = field(default_factory=list)  # near-duplicates hidden


@dataclass(slots=True)
class VerificationRecord:
    turn: int
    claim: str
    doc_id: str
    verdict: str
    score: float
    evidence: list[str]


# One record's fields by name: the JSON of PoolEntry, MemoryEntry, CuratedItem, CurationEvent,
# SearchRecord or VerificationRecord.
RecordJson = JSONObject
_Record = TypeVar("_Record")


class HarnessStateJson(TypedDict):
    """`HarnessState.to_json()`: the snapshot each turn record carries and Turn rows store."""

    query_id: str
    question: str
    turn: int
    turns_used: int
    done: bool
    termination_reason: str
    final_reasoning: str
    format_errors: int
    error_streak: int
    tokens_used: int
    wm_tokens: int
    tool_counts: dict[str, int]
    shown: dict[str, int]
    pool: dict[str, RecordJson]
    memory: dict[str, RecordJson]
    curated: dict[str, RecordJson]
    curation_log: list[RecordJson]
    suppressed: dict[str, str]
    searches: list[RecordJson]
    verifications: list[RecordJson]
    graph: JSONObject


def _record_json(record: Any) -> RecordJson:
    # Records hold only str/int/float/bool and lists of str, so a shallow copy of each
    # list is enough for the snapshot not to alias live state.
    out = {}
    for name in record.__slots__:
        value = getattr(record, name)
        out[name] = list(value) if isinstance(value, list) else value
    return out


def _records_json(items: Mapping[str, object]) -> dict[str, RecordJson]:
    return {k: _record_json(v) for k, v in items.items()}


@dataclass(slots=True)
class HarnessState:
    query_id: str
    question: str
    turn: int = 0  # step index: every step adds one
    turns_used: int = 0  # turns counted toward max_turns and the turn penalty
    done: bool = False
    termination_reason: str = ""
    final_reasoning: str = ""
    format_errors: int = 0
    error_streak: int = 0  # consecutive turns in which every call was a format error
    tokens_used: int = 0  # estimated context size now (see budget.py)
    wm_tokens: int = 0  # estimated size of the latest WORKINGMEMORY
    tool_counts: dict[str, int] = field(default_factory=dict)
    shown: dict[str, int] = field(default_factory=dict)
    pool: dict[str, PoolEntry] = field(default_factory=dict)
    memory: dict[str, MemoryEntry] = field(default_factory=dict)
    curated: dict[str, CuratedItem] = field(default_factory=dict)
    curation_log: list[CurationEvent] = field(default_factory=list)
    suppressed: dict[str, str] = field(default_factory=dict)  # near-duplicate id -> kept id
    searches: list[SearchRecord] = field(default_factory=list)
    verifications: list[VerificationRecord] = field(default_factory=list)
    graph: EvidenceGraph = field(default_factory=EvidenceGraph)

    @property
    def shown_ids(self) -> set[str]:
        """T: every doc id shown to the model in this episode (a fresh set)."""
        return set(self.shown)

    def curated_ids(self) -> set[str]:
        return set(self.curated)

    def events_at(self, turn: int) -> list[CurationEvent]:
        """The curation diff of one turn, for the UI."""
        return [e for e in self.curation_log if e.turn == turn]

    def evictions(self) -> list[CurationEvent]:
        return [e for e in self.curation_log if e.kind == "evicted"]

    def to_json(self) -> HarnessStateJson:
        return {
            "query_id": self.query_id,
            "question": self.question,
            "turn": self.turn,
            "turns_used": self.turns_used,
            "done": self.done,
            "termination_reason": self.termination_reason,
            "final_reasoning": self.final_reasoning,
            "format_errors": self.format_errors,
            "error_streak": self.error_streak,
            "tokens_used": self.tokens_used,
            "wm_tokens": self.wm_tokens,
            "tool_counts": dict(self.tool_counts),
            "shown": dict(self.shown),
            "pool": _records_json(self.pool),
            "memory": _records_json(self.memory),
            "curated": _records_json(self.curated),
            "curation_log": [_record_json(e) for e in self.curation_log],
            "suppressed": dict(self.suppressed),
            "searches": [_record_json(s) for s in self.searches],
            "verifications": [_record_json(v) for v in self.verifications],
            "graph": self.graph.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HarnessState:
        return cls(
            query_id=data["query_id"],
            question=data["question"],
            turn=data["turn"],
            # Snapshots from before the count existed counted every step.
            turns_used=data.get("turns_used", data["turn"]),
            done=data["done"],
            termination_reason=data["termination_reason"],
            final_reasoning=data["final_reasoning"],
            format_errors=data["format_errors"],
            error_streak=data["error_streak"],
            tokens_used=data["tokens_used"],
            wm_tokens=data["wm_tokens"],
            tool_counts=dict(data["tool_counts"]),
            shown=dict(data["shown"]),
            pool={k: _load(PoolEntry, v) for k, v in data["pool"].items()},
            memory={k: _load(MemoryEntry, v) for k, v in data["memory"].items()},
            curated={k: _load(CuratedItem, v) for k, v in data["curated"].items()},
            curation_log=[_load(CurationEvent, e) for e in data["curation_log"]],
            suppressed=dict(data["suppressed"]),
            searches=[_load(SearchRecord, s) for s in data["searches"]],
            verifications=[_load(VerificationRecord, v) for v in data["verifications"]],
            graph=EvidenceGraph.from_json(data["graph"]),
        )


def _load(record_type: Callable[..., _Record], data: RecordJson) -> _Record:
    return record_type(**{k: list(v) if isinstance(v, list) else v for k, v in data.items()})


def consistency_problems(state: HarnessState, capacity: int) -> list[str]:
    """Invariants every reachable state satisfies; empty when consistent.

    Used by the property tests and handy when loading a snapshot from elsewhere.
    """
    problems = []
    if len(state.curated) > capacity:
        problems.append(f"{len(state.curated)} curated docs exceed capacity {capacity}")
    problems += [f"curated {d!r} was never shown" for d in state.curated if d not in state.shown]
    problems += [
        f"curated {d!r} has invalid tag {item.importance!r}"
        for d, item in state.curated.items()
        if item.importance not in IMPORTANCE_RANK
    ]
    problems += [f"pool doc {d!r} was never shown" for d in state.pool if d not in state.shown]
    problems += [f"memory doc {d!r} not in pool" for d in state.memory if d not in state.pool]
    problems += [
        f"suppressed {d!r} maps to unshown {k!r}"
        for d, k in state.suppressed.items()
        if k not in state.memory
    ]
    if state.turns_used > state.turn:
        problems.append(f"turns_used {state.turns_used} exceeds the step index {state.turn}")
    problems += [
        f"verification of unshown {v.doc_id!r}"
        for v in state.verifications
        if v.doc_id not in state.shown or v.verdict not in VERDICTS
    ]
    problems += [
        f"graph doc {d!r} not in memory" for d in state.graph.docs if d not in state.memory
    ]
    return problems
