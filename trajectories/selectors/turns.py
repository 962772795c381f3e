"""Reads of an episode's turns: the harness state after a turn, and the per-turn replay
that the episode viewer and the compare view show, as plain data.

A turn row stores the harness state as a snapshot or a delta (harness/jsondelta.py).
`turn_state` rebuilds one turn's whole state from its last snapshot on; `turn_states`
rebuilds every turn's. The viewer needs the whole state only after the last turn; per turn
it needs the curated set, its typed changes and the budget. The curated set is replayed
from the final curation log, which dates every change, and the budget is one JSON lookup
per row. For a 40-turn episode with a 500-document pool that reads ~1.3 MB of state
instead of the ~5 MB that `turn_states` decodes to rebuild every full state, and the
tests check the replay against `turn_states` turn by turn.

Everything the final state dates (pool entries, searches, verifications, graph nodes carry
the turn they appeared) is sent once and filtered by turn in the browser, so the page grows
with turns × curated documents, not turns × pool.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Case, OuterRef, Q, QuerySet, Subquery, When
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import JSONObject

from harness_app.harness import jsondelta
from harness_app.harness.state import IMPORTANCE_RANK
from harness_app.models import Qrel
from trajectories.models import Episode, Turn, VerifierCall
from trajectories.selectors.calls import CallSummary

# --- whole states ------------------------------------------------------------------------------


def turn_states(*, episode: Episode, upto: int | None = None) -> list[dict[str, Any]]:
    """The full harness state after each turn (0..upto), rebuilt from snapshots and deltas."""
    rows = Turn.objects.filter(episode=episode).order_by("index")
    if upto is not None:
        rows = rows.filter(index__lte=upto)
    states: list[dict[str, Any]] = []
    for state, is_delta in rows.values_list("state", "state_is_delta"):
        states.append(jsondelta.apply(states[-1], state) if is_delta else state)
    return states


def turn_state(*, episode: Episode, index: int) -> dict[str, Any]:
    """The state after one turn, reading only from its last full snapshot onwards."""
    start = (
        Turn.objects.filter(episode=episode, index__lte=index, state_is_delta=False)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
    )
    if start is None:
        raise Turn.DoesNotExist(f"episode {episode.pk} has no turn {index}")
    rows = Turn.objects.filter(episode=episode, index__gte=start, index__lte=index)
    state: dict[str, Any] = {}
    for delta, is_delta in rows.order_by("index").values_list("state", "state_is_delta"):
        state = jsondelta.apply(state, delta) if is_delta else delta
    return state


# --- qrels -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gold:
    grades: dict[str, int]  # document external id -> grade, every judged document
    titles: dict[str, str]

    def grade(self, doc_id: str) -> int | None:
        return self.grades.get(doc_id)

    @property
    def relevant(self) -> list[str]:
        """Relevant documents, answer-bearing first."""
        ids = [d for d, g in self.grades.items() if g > 0]
        return sorted(ids, key=lambda d: (-self.grades[d], d))


def gold_for(*, query_id: int | None) -> Gold:
    if query_id is None:  # a recorded episode: nothing is judged
        return Gold(grades={}, titles={})
    rows = Qrel.objects.filter(query_id=query_id).values_list(
        "document__external_id", "grade", "document__title"
    )
    grades, titles = {}, {}
    for doc_id, grade, title in rows:
        grades[doc_id], titles[doc_id] = grade, title
    return Gold(grades=grades, titles=titles)


# --- per-turn parts of the state ---------------------------------------------------------------


def turn_rows(episodes: Q) -> QuerySet[Turn]:
    """Turns of the matching episodes without their state, but with its budget figures.

    `p_budget` is a delta's replaced scalars (tokens_used, wm_tokens and turns_used among
    them) or a snapshot's three budget figures: one JSON lookup per row. Each lookup
    decompresses the whole stored state on PostgreSQL, so asking a 1 MB snapshot for ten
    keys costs ten decompressions; this keeps it to one.
    """
    budget = JSONObject(
        tokens_used=KeyTransform("tokens_used", "state"),
        wm_tokens=KeyTransform("wm_tokens", "state"),
        turns_used=KeyTransform("turns_used", "state"),
    )
    rows = Turn.objects.filter(episodes).defer("state")
    rows = rows.annotate(
        p_budget=Case(When(state_is_delta=True, then=KeyTransform("set", "state")), default=budget)
    )
    return rows.order_by("episode_id", "index")


@dataclass(frozen=True)
class TurnParts:
    curated: dict[str, dict[str, Any]]
    events: list[dict[str, Any]]  # the curation events of this turn
    tokens_used: int
    wm_tokens: int
    turns_used: int  # turns counted toward max_turns so far (harness state.turns_used)


def replay_parts(rows: Iterable[Turn], curation_log: Iterable[dict[str, Any]]) -> list[TurnParts]:
    """The curated set, its events and the budget after each turn.

    The curated set is replayed from the final curation log, which records every change
    with its turn (harness/curation.py logs each pop and insert), so no per-turn state is
    read for it; the budget comes from the rows' `p_budget`.
    """
    by_turn: dict[int, list[dict[str, Any]]] = {}
    for event in curation_log:
        by_turn.setdefault(event["turn"], []).append(event)
    curated: dict[str, dict[str, Any]] = {}
    tokens = wm = counted = 0
    every_step = False  # states saved before turns_used existed counted every step
    out = []
    for row in rows:
        events = by_turn.get(row.index, [])
        curated = _curation_applied(curated, events, row.index)
        budget = row.__dict__.get("p_budget") or {}
        tokens = int(budget.get("tokens_used", tokens))
        wm = int(budget.get("wm_tokens", wm))
        if not row.state_is_delta:
            every_step = budget.get("turns_used") is None
        counted = row.index if every_step else int(budget.get("turns_used", counted))
        out.append(TurnParts(curated, events, tokens, wm, counted))
    return out


def _curation_applied(
    curated: dict[str, dict[str, Any]], events: list[dict[str, Any]], turn: int
) -> dict[str, dict[str, Any]]:
    if not events:
        return curated
    after = dict(curated)
    for e in events:
        if e["kind"] == "added":
            after[e["doc_id"]] = {"importance": e["importance"], "added_turn": turn}
        elif e["kind"] == "retagged":
            after[e["doc_id"]] = {**after[e["doc_id"]], "importance": e["importance"]}
        elif e["kind"] in ("removed", "evicted"):
            after.pop(e["doc_id"], None)
    return after


def final_curation_log(episodes: Q) -> dict[int, list[dict[str, Any]]]:
    """Each matching episode's whole curation log, read from its last snapshot onwards:
    the log is append-only, so a snapshot holds it and later deltas append to it."""
    last_snapshot = (
        Turn.objects.filter(episode_id=OuterRef("episode_id"), state_is_delta=False)
        .order_by("-index")
        .values("index")[:1]
    )
    log_part = Case(
        When(state_is_delta=True, then=KeyTransform("curation_log", KeyTransform("app", "state"))),
        default=KeyTransform("curation_log", "state"),
    )
    rows = (
        Turn.objects.filter(episodes, index__gte=Subquery(last_snapshot))
        .annotate(p_log=log_part)
        .order_by("episode_id", "index")
        .values_list("episode_id", "p_log")
    )
    logs: dict[int, list[dict[str, Any]]] = {}
    for episode_id, part in rows:
        logs.setdefault(episode_id, []).extend(part or [])
    return logs


# --- one turn --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CuratedRow:
    doc_id: str
    tag: str
    added_turn: int
    grade: int | None
    change: str  # "added" or "retagged" this turn, else ""


@dataclass(frozen=True)
class Change:
    """One typed event of the curated-set diff: added, removed, evicted, retagged, refused."""

    kind: str
    doc_id: str
    importance: str
    detail: str
    grade: int | None


@dataclass(frozen=True)
class ToolCallView:
    name: str
    arguments: str  # pretty JSON
    call_id: str


@dataclass
class TurnView:
    index: int
    tool_calls: list[ToolCallView]
    observation: str
    curated_recall: float
    trajectory_recall: float
    final_answer_recall: float
    curated: list[CuratedRow]
    changes: list[Change]
    tokens_used: int
    wm_tokens: int
    format_errors: int  # this turn's failed tool calls
    harness_ms: float
    policy_ms: float
    turns_used: int = 0  # turns counted toward max_turns after this one
    # Whether this turn counted toward max_turns: a turn whose every call failed, or that
    # only ended the search, does not (docs/harness.md, "What counts as a turn").
    counted: bool = True
    pool_size: int = 0
    shown_new: int = 0
    gold_seen: list[str] = field(default_factory=list)  # relevant docs first shown this turn
    calls: list[CallSummary] = field(default_factory=list)
    verifier_calls: list[VerifierCall] = field(default_factory=list)  # not training data

    @property
    def marks(self) -> list[str]:
        """What happened this turn, for the timeline: gold seen, gold curated, evictions."""
        marks = ["gold seen"] if self.gold_seen else []
        if any(c.kind == "added" and c.grade for c in self.changes):
            marks.append("gold curated")
        if any(c.kind == "evicted" for c in self.changes):
            marks.append("evicted")
        elif any(c.kind == "removed" and c.grade for c in self.changes):
            marks.append("gold removed")
        return marks


def _curated_rows(curated: Mapping[str, Any], events: list[Change], gold: Gold) -> list[CuratedRow]:
    changed = {e.doc_id: e.kind for e in events if e.kind in ("added", "retagged")}
    rows = [
        CuratedRow(
            doc_id=doc_id,
            tag=item["importance"],
            added_turn=item["added_turn"],
            grade=gold.grade(doc_id),
            change=changed.get(doc_id, ""),
        )
        for doc_id, item in curated.items()
    ]
    rows.sort(key=lambda r: (-IMPORTANCE_RANK.get(r.tag, -1), r.added_turn, r.doc_id))
    return rows


def _tool_calls(calls: Iterable[Mapping[str, Any]]) -> list[ToolCallView]:
    return [
        ToolCallView(
            name=str(c.get("name", "")),
            arguments=json.dumps(c.get("arguments", {}), indent=1, ensure_ascii=False),
            call_id=str(c.get("call_id", "")),
        )
        for c in calls
    ]


def turn_views(
    *, rows: list[Turn], curation_log: list[dict[str, Any]], gold: Gold
) -> list[TurnView]:
    """One TurnView per row of `turn_rows` (one episode's, in turn order)."""
    views = []
    errors_before = counted_before = 0  # Turn.format_errors is the episode's running total
    for row, part in zip(rows, replay_parts(rows, curation_log), strict=True):
        changes = [
            Change(
                e["kind"],
                e["doc_id"],
                e["importance"],
                e.get("detail", ""),
                gold.grade(e["doc_id"]),
            )
            for e in part.events
        ]
        views.append(
            TurnView(
                index=row.index,
                tool_calls=_tool_calls(row.tool_calls),
                observation=row.observation,
                curated_recall=row.curated_recall,
                trajectory_recall=row.trajectory_recall,
                final_answer_recall=row.final_answer_recall,
                curated=_curated_rows(part.curated, changes, gold),
                changes=changes,
                tokens_used=part.tokens_used,
                wm_tokens=part.wm_tokens,
                format_errors=row.format_errors - errors_before,
                harness_ms=row.harness_ms,
                policy_ms=row.policy_ms,
                turns_used=part.turns_used,
                counted=row.index > 0 and part.turns_used > counted_before,
            )
        )
        errors_before, counted_before = row.format_errors, part.turns_used
    return views


def add_pool_growth(turns: list[TurnView], final: Mapping[str, Any], gold: Gold) -> None:
    """Fill in each turn's pool size and the documents first shown that turn."""
    # Pool entries and first-shown turns never change once written, so the final state
    # dates them for every turn.
    pooled = Counter(entry.get("first_turn", 0) for entry in final.get("pool", {}).values())
    shown: dict[int, list[str]] = {}
    for doc_id, turn in final.get("shown", {}).items():
        shown.setdefault(turn, []).append(doc_id)
    size = 0
    for view in turns:
        size += pooled.get(view.index, 0)
        first = shown.get(view.index, [])
        view.pool_size = size
        view.shown_new = len(first)
        view.gold_seen = sorted(d for d in first if (gold.grade(d) or 0) > 0)


# --- whole-episode panels ---------------------------------------------------------------------


@dataclass(frozen=True)
class PoolRow:
    doc_id: str
    title: str
    score: float
    first_turn: int
    query: str
    source: str
    grade: int | None
    read: bool
    curated_final: bool


def pool_rows(final: Mapping[str, Any], gold: Gold) -> list[PoolRow]:
    """The final pool, best score first; each row dated so the browser can replay it."""
    memory = final.get("memory", {})
    curated = final.get("curated", {})
    rows = [
        PoolRow(
            doc_id=doc_id,
            title=entry.get("title") or doc_id,
            score=entry.get("score", 0.0),
            first_turn=entry.get("first_turn", 0),
            query=entry.get("query", ""),
            source=entry.get("source", ""),
            grade=gold.grade(doc_id),
            read=bool(memory.get(doc_id, {}).get("read")),
            curated_final=doc_id in curated,
        )
        for doc_id, entry in final.get("pool", {}).items()
    ]
    rows.sort(key=lambda r: (-r.score, r.first_turn, r.doc_id))
    return rows


@dataclass(frozen=True)
class GoldTimeline:
    """When one relevant document was first seen, curated, evicted or removed."""

    doc_id: str
    title: str
    grade: int
    seen_turn: int | None
    events: list[tuple[int, str]]  # (turn, kind), kind in added/retagged/removed/evicted
    curated_final: bool


def gold_timelines(final: Mapping[str, Any], gold: Gold) -> list[GoldTimeline]:
    events: dict[str, list[tuple[int, str]]] = {}
    for e in final.get("curation_log", []):
        if e["kind"] != "refused":
            events.setdefault(e["doc_id"], []).append((e["turn"], e["kind"]))
    pool = final.get("pool", {})
    return [
        GoldTimeline(
            doc_id=doc_id,
            title=gold.titles.get(doc_id) or pool.get(doc_id, {}).get("title") or doc_id,
            grade=gold.grades[doc_id],
            seen_turn=final.get("shown", {}).get(doc_id),
            events=events.get(doc_id, []),
            curated_final=doc_id in final.get("curated", {}),
        )
        for doc_id in gold.relevant
    ]


def recall_chart(turns: list[TurnView], timelines: list[GoldTimeline]) -> dict[str, Any]:
    """Recall per turn and the gold documents' events, for the recall chart."""
    gold_events = [
        {"doc": t.doc_id, "grade": t.grade, "turn": turn, "kind": kind}
        for t in timelines
        for turn, kind in ([(t.seen_turn, "seen")] if t.seen_turn is not None else []) + t.events
    ]
    return {
        "turns": [t.index for t in turns],
        "curated": [t.curated_recall for t in turns],
        "trajectory": [t.trajectory_recall for t in turns],
        "final_answer": [t.final_answer_recall for t in turns],
        "gold": [t.doc_id for t in timelines],
        "gold_events": gold_events,
    }
