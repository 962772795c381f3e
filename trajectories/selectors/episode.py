"""Reads for the episode viewer, the document viewer and the compare view.

The per-turn replay these pages show is in turns.py; this module assembles it with the
final state's panels (pool, searches, verifications, graph) and the model calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from harness_app.harness.config import HarnessConfig
from harness_app.harness.text import analyze
from harness_app.models import Document, Qrel
from trajectories.models import Episode, ModelCall, Turn, VerifierCall
from trajectories.selectors.calls import BLOB_FIELDS, CallSummary, call_summary
from trajectories.selectors.graph import graph_data
from trajectories.selectors.turns import (
    Gold,
    GoldTimeline,
    PoolRow,
    TurnView,
    add_pool_growth,
    final_curation_log,
    gold_for,
    gold_timelines,
    pool_rows,
    recall_chart,
    turn_rows,
    turn_state,
    turn_views,
)

COMPARE_CANDIDATES = 50


# --- the page ---------------------------------------------------------------------------------


@dataclass
class EpisodeView:
    episode: Episode
    gold: Gold
    turns: list[TurnView]
    pool: list[PoolRow]
    searches: list[dict[str, Any]]
    verifications: list[dict[str, Any]]
    timelines: list[GoldTimeline]
    graph: dict[str, Any]
    recall: dict[str, Any]
    context_limit: int
    siblings: list[Episode]

    @property
    def last_turn(self) -> int:
        """Turns taken: the strip's numbered turns (the start, turn 0, is not one of them)."""
        return self.turns[-1].index if self.turns else 0

    @property
    def turns_counted(self) -> int:
        """Turns counted toward max_turns; fewer than `last_turn` when some turns' calls all
        failed or only ended the search (docs/harness.md, "What counts as a turn")."""
        return self.turns[-1].turns_used if self.turns else 0


def episode_get(*, pk: int) -> Episode | None:
    return (
        Episode.objects.select_related("query", "batch__benchmark", "batch__policy", "group")
        .filter(pk=pk)
        .first()
    )


def _call_summaries(episode: Episode) -> dict[int, list[CallSummary]]:
    calls = ModelCall.objects.filter(episode=episode).defer("request", *BLOB_FIELDS)
    out: dict[int, list[CallSummary]] = {}
    for number, call in enumerate(calls.order_by("pk"), start=1):
        out.setdefault(call.turn_index, []).append(call_summary(call, number=number))
    return out


# What the turn view shows of a verifier call; never the request or the token blobs.
VERIFIER_CALL_FIELDS = (
    "pk",
    "turn_index",
    "doc_id",
    "model",
    "verdict",
    "rationale",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "error",
)


def _verifier_calls(episode: Episode) -> dict[int, list[VerifierCall]]:
    calls = VerifierCall.objects.filter(episode=episode).only(*VERIFIER_CALL_FIELDS)
    out: dict[int, list[VerifierCall]] = {}
    for call in calls.order_by("pk"):
        out.setdefault(call.turn_index, []).append(call)
    return out


def compare_candidates(*, episode: Episode, limit: int = COMPARE_CANDIDATES) -> list[Episode]:
    """Other episodes of the same query, newest batch first, to compare against."""
    if episode.query_id is None:
        return []
    others = Episode.objects.filter(query_id=episode.query_id).exclude(pk=episode.pk)
    others = others.select_related("batch__policy").only(
        "pk", "sample_index", "reward", "batch__id", "batch__ablation_label", "batch__policy__name"
    )
    return list(others.order_by("-batch_id", "sample_index")[:limit])


def episode_view(*, episode: Episode) -> EpisodeView:
    """Everything the viewer shows, in eight queries whatever the number of turns: qrels,
    turns (with their per-turn state parts), the final state (two), model calls, verifier
    calls and the other runs of the query."""
    gold = gold_for(query_id=episode.query_id)
    rows = list(turn_rows(Q(episode=episode)))
    final = turn_state(episode=episode, index=rows[-1].index) if rows else {}
    turns = turn_views(rows=rows, curation_log=final.get("curation_log", []), gold=gold)
    add_pool_growth(turns, final, gold)
    calls = _call_summaries(episode)
    verifier_calls = _verifier_calls(episode)
    for turn in turns:
        turn.calls = calls.get(turn.index, [])
        turn.verifier_calls = verifier_calls.get(turn.index, [])
    timelines = gold_timelines(final, gold)
    return EpisodeView(
        episode=episode,
        gold=gold,
        turns=turns,
        pool=pool_rows(final, gold),
        searches=_searches(final),
        verifications=_verifications(final, gold),
        timelines=timelines,
        graph=graph_data(final, gold, turns[-1].index if turns else 0),
        recall=recall_chart(turns, timelines),
        context_limit=HarnessConfig().context_token_limit,
        siblings=compare_candidates(episode=episode),
    )


def _searches(final: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "turn": s["turn"],
            "tool": s["tool"],
            "query": s["query"],
            "shown": len(s.get("hit_ids", [])),
            "hidden": len(s.get("suppressed", [])),
        }
        for s in final.get("searches", [])
    ]


def _verifications(final: Mapping[str, Any], gold: Gold) -> list[dict[str, Any]]:
    return [{**v, "grade": gold.grade(v["doc_id"])} for v in final.get("verifications", [])]


# --- the document viewer ----------------------------------------------------------------------

_WORD_RE = re.compile(r"\w+")


@dataclass(frozen=True)
class DocumentInEpisode:
    grade: int | None
    shown_turn: int | None
    pool: dict[str, Any] | None
    read: bool
    events: list[dict[str, Any]]
    verifications: list[dict[str, Any]]
    segments: list[tuple[str, bool]]  # the text, split where question terms match


def episode_final_state(*, episode: Episode) -> dict[str, Any]:
    """The state after the episode's last recorded turn; {} before the first."""
    last = (
        Turn.objects.filter(episode=episode).order_by("-index").values_list("index", flat=True)
    ).first()
    return {} if last is None else turn_state(episode=episode, index=last)


def document_in_episode(*, episode: Episode, document: Document) -> DocumentInEpisode:
    """Its relevance grade and what happened to it in the episode: four queries."""
    _, _, query = episode.rollout_parts()
    grade = (
        Qrel.objects.filter(query=query, document=document).values_list("grade", flat=True).first()
    )
    final = episode_final_state(episode=episode)
    doc_id = document.external_id
    return DocumentInEpisode(
        grade=grade,
        shown_turn=final.get("shown", {}).get(doc_id),
        pool=final.get("pool", {}).get(doc_id),
        read=bool(final.get("memory", {}).get(doc_id, {}).get("read")),
        events=[e for e in final.get("curation_log", []) if e["doc_id"] == doc_id],
        verifications=[v for v in final.get("verifications", []) if v["doc_id"] == doc_id],
        segments=highlight(document.text, set(analyze(query.text))),
    )


def highlight(text: str, terms: set[str]) -> list[tuple[str, bool]]:
    """Split `text` into (piece, matches) runs; a word matches when it analyses to one of
    `terms` (so "rivers" marks for a question about a "river"). Plain text in, plain text
    out: the template escapes every piece."""
    segments: list[tuple[str, bool]] = []
    at = 0
    for match in _WORD_RE.finditer(text):
        if not terms.intersection(analyze(match.group())):
            continue
        if match.start() > at:
            segments.append((text[at : match.start()], False))
        segments.append((match.group(), True))
        at = match.end()
    if at < len(text):
        segments.append((text[at:], False))
    return segments


# --- comparing two episodes -------------------------------------------------------------------


class CompareError(ValueError):
    """Two episodes that cannot be compared; the message says why."""


@dataclass(frozen=True)
class CompareRow:
    index: int
    a: TurnView | None
    b: TurnView | None
    both: frozenset[str]  # documents curated on both sides after this turn

    @property
    def sides(self) -> tuple[TurnView | None, TurnView | None]:
        return self.a, self.b


@dataclass
class CompareView:
    a: Episode
    b: Episode
    gold: Gold
    rows: list[CompareRow]
    chart: dict[str, Any]


@dataclass(frozen=True)
class CompareTarget:
    """Where two episodes can be set side by side: the compare view when they answer one
    query; for two queries, the paired comparison of the evaluation run whose batches hold
    both (`evaluation`, the two configuration keys and their common benchmark, if any);
    otherwise nowhere, and `reason` says why."""

    same_query: bool
    reason: str = ""
    evaluation: int | None = None
    configs: tuple[str, str] = ("", "")
    benchmark: int | None = None


def compare_target(*, a_pk: int, b_pk: int) -> CompareTarget:
    """One query: the two episodes with their batches."""
    found = Episode.objects.select_related("batch").filter(pk__in=[a_pk, b_pk])
    episodes = {e.pk: e for e in found}
    for pk in (a_pk, b_pk):
        if pk not in episodes:
            return CompareTarget(same_query=False, reason=f"episode {pk} does not exist")
    a, b = episodes[a_pk], episodes[b_pk]
    if a.query_id is None or b.query_id is None:
        recorded = a if a.query_id is None else b
        reason = f"episode {recorded.pk} is a recorded session: it has no query to compare by"
        return CompareTarget(same_query=False, reason=reason)
    if a.query_id == b.query_id:
        return CompareTarget(same_query=True)
    reason = f"episodes {a.pk} and {b.pk} answer different queries; compare shows runs of one query"
    batch_a, batch_b = a.batch, b.batch
    apart = f"{reason}, and they are not in one evaluation run"
    if batch_a is None or batch_b is None or batch_a.evaluation_id is None:
        return CompareTarget(same_query=False, reason=apart)
    if batch_a.evaluation_id != batch_b.evaluation_id:
        return CompareTarget(same_query=False, reason=apart)
    return CompareTarget(
        same_query=False,
        reason=reason,
        evaluation=batch_a.evaluation_id,
        # The keys of selectors.evaluations.Config: "<policy pk>:<condition>".
        configs=(
            f"{batch_a.policy_id}:{batch_a.evaluation_condition}",
            f"{batch_b.policy_id}:{batch_b.evaluation_condition}",
        ),
        benchmark=batch_a.benchmark_id if batch_a.benchmark_id == batch_b.benchmark_id else None,
    )


def compare_view(*, a_pk: int, b_pk: int) -> CompareView:
    """Two episodes of one query, turn-aligned: four queries (episodes, qrels, turns, and
    the curation logs).

    Raises CompareError when either is missing or they answer different queries.
    """
    found = Episode.objects.select_related("query", "batch__benchmark", "batch__policy")
    episodes = {e.pk: e for e in found.filter(pk__in=[a_pk, b_pk])}
    for pk in (a_pk, b_pk):
        if pk not in episodes:
            raise CompareError(f"episode {pk} does not exist")
    a, b = episodes[a_pk], episodes[b_pk]
    query_a, query_b = a.query, b.query
    if query_a is None or query_b is None:
        recorded = a if query_a is None else b
        raise CompareError(f"episode {recorded.pk} is a recorded session: it has no query")
    if query_a.pk != query_b.pk:
        raise CompareError(
            f"episodes {a.pk} and {b.pk} answer different queries "
            f"({query_a.external_id} and {query_b.external_id}); compare runs of one query"
        )
    gold = gold_for(query_id=query_a.pk)
    rows: dict[int, list[Turn]] = {a.pk: [], b.pk: []}
    for row in turn_rows(Q(episode_id__in=[a.pk, b.pk])):
        rows[row.episode_id].append(row)
    logs = final_curation_log(Q(episode_id__in=[a.pk, b.pk]))
    side_a = turn_views(rows=rows[a.pk], curation_log=logs.get(a.pk, []), gold=gold)
    side_b = turn_views(rows=rows[b.pk], curation_log=logs.get(b.pk, []), gold=gold)
    return CompareView(
        a=a, b=b, gold=gold, rows=_aligned(side_a, side_b), chart=_compare_chart(side_a, side_b)
    )


def _aligned(side_a: list[TurnView], side_b: list[TurnView]) -> list[CompareRow]:
    by_a = {t.index: t for t in side_a}
    by_b = {t.index: t for t in side_b}
    out = []
    for index in sorted(by_a.keys() | by_b.keys()):
        ta, tb = by_a.get(index), by_b.get(index)
        docs_a = {r.doc_id for r in ta.curated} if ta else set()
        docs_b = {r.doc_id for r in tb.curated} if tb else set()
        out.append(CompareRow(index=index, a=ta, b=tb, both=frozenset(docs_a & docs_b)))
    return out


def _compare_chart(side_a: list[TurnView], side_b: list[TurnView]) -> dict[str, Any]:
    def curves(turns: list[TurnView]) -> dict[str, list[float] | list[int]]:
        return {
            "turns": [t.index for t in turns],
            "curated": [t.curated_recall for t in turns],
            "trajectory": [t.trajectory_recall for t in turns],
            "final_answer": [t.final_answer_recall for t in turns],
        }

    return {"a": curves(side_a), "b": curves(side_b)}
