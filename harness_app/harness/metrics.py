"""Episode metrics in Harness-1's terms.

Notation, as in the paper: D(C) is the curated set the policy hands back, G the relevant
documents (grade >= 1), A the answer-bearing documents (grade 2) and T every document the
episode showed the policy. Curated metrics score D(C); trajectory metrics score T, so the
gap between them says how much good evidence the policy saw but failed to keep.

Everything here takes plain sets and counts rather than the environment's state object, so
the same code scores live episodes, persisted ones and hand-written test cases.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from harness_app.harness.tools import END_SEARCH
from harness_app.harness.types import QuerySpec, Retriever

# end_search only closes the episode; counting it would reward a policy for stopping.
DIVERSITY_EXCLUDED_TOOLS = frozenset({END_SEARCH})


def _ratio(hits: int, total: int) -> float:
    return hits / total if total else 0.0


def f_beta(precision: float, recall: float, beta: float = 2.0) -> float:
    """F-beta score; beta > 1 weighs recall above precision (beta=2: recall counts 4x)."""
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    b2 = beta * beta
    denominator = b2 * precision + recall
    return (1 + b2) * precision * recall / denominator if denominator else 0.0


def answer_targets(query: QuerySpec) -> frozenset[str]:
    """A for final-answer recall: the grade-2 documents, or G when the qrels have none.

    Single-hop sets such as SciFact grade every judged document 1: each one *is* the
    evidence the answer rests on, so treating G as A keeps final-answer recall meaningful
    there instead of pinning it (and the reward's answer terms) at zero.
    """
    return query.answer_docs or query.relevant


def tool_diversity(tool_counts: Mapping[str, int]) -> int:
    """U: how many distinct tools were used at least once, end_search not counted."""
    return sum(
        1 for name, n in tool_counts.items() if n > 0 and name not in DIVERSITY_EXCLUDED_TOOLS
    )


@dataclass(frozen=True, slots=True)
class RecallSoFar:
    """Recall at one point of an episode, for the per-turn curve in the UI."""

    curated: float
    trajectory: float
    final_answer: float

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def recall_so_far(
    curated_ids: Collection[str], shown_ids: Collection[str], query: QuerySpec
) -> RecallSoFar:
    relevant = query.relevant
    return RecallSoFar(
        curated=_ratio(len(relevant.intersection(curated_ids)), len(relevant)),
        trajectory=_ratio(len(relevant.intersection(shown_ids)), len(relevant)),
        final_answer=_ratio(
            len(answer_targets(query).intersection(curated_ids)), len(answer_targets(query))
        ),
    )


def single_search_recall(retriever: Retriever, query: QuerySpec, k: int) -> RecallSoFar:
    """Plain retrieval with the question as the only query, cut at k documents.

    The bar a search agent must clear at the same number of documents: an agent that
    curates k documents after many turns should beat one search that returns k.
    """
    ids = [hit.doc_id for hit in retriever.search(query.text, k=k)] if k > 0 else []
    return recall_so_far(ids, ids, query)


@dataclass(frozen=True, slots=True)
class EpisodeMetrics:
    """The scores of one finished episode; every ratio lies in [0, 1]."""

    curated_recall: float
    precision: float
    f_beta: float
    beta: float
    final_answer_recall: float
    trajectory_recall: float
    trajectory_final_answer_recall: float
    tool_diversity: int
    turns: int  # counted turns (HarnessState.turns_used), not steps
    format_errors: int
    curated_count: int
    shown_count: int
    relevant_count: int
    answer_count: int

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpisodeMetrics:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def episode_metrics(
    *,
    curated_ids: Collection[str],
    shown_ids: Collection[str],
    tool_counts: Mapping[str, int],
    turns: int,
    format_errors: int,
    query: QuerySpec,
    beta: float = 2.0,
) -> EpisodeMetrics:
    """Score an episode from its outcome alone (no environment object needed)."""
    relevant, answers = query.relevant, answer_targets(query)
    curated, shown = set(curated_ids), set(shown_ids)
    curated_hits = len(curated & relevant)
    recall = _ratio(curated_hits, len(relevant))
    precision = _ratio(curated_hits, len(curated))
    return EpisodeMetrics(
        curated_recall=recall,
        precision=precision,
        f_beta=f_beta(precision, recall, beta),
        beta=beta,
        final_answer_recall=_ratio(len(curated & answers), len(answers)),
        trajectory_recall=_ratio(len(shown & relevant), len(relevant)),
        trajectory_final_answer_recall=_ratio(len(shown & answers), len(answers)),
        tool_diversity=tool_diversity(tool_counts),
        turns=turns,
        format_errors=format_errors,
        curated_count=len(curated),
        shown_count=len(shown),
        relevant_count=len(relevant),
        answer_count=len(answers),
    )


class EpisodeStateLike(Protocol):
    """The slice of the environment's HarnessState that scoring reads."""

    @property
    def shown_ids(self) -> Collection[str]: ...

    @property
    def tool_counts(self) -> Mapping[str, int]: ...

    @property
    def turns_used(self) -> int: ...

    @property
    def format_errors(self) -> int: ...

    def curated_ids(self) -> Collection[str]: ...


def metrics_from_state(
    state: EpisodeStateLike, query: QuerySpec, *, beta: float = 2.0
) -> EpisodeMetrics:
    return episode_metrics(
        curated_ids=state.curated_ids(),
        shown_ids=state.shown_ids,
        tool_counts=state.tool_counts,
        turns=state.turns_used,
        format_errors=state.format_errors,
        query=query,
        beta=beta,
    )


def recall_so_far_from_state(state: EpisodeStateLike, query: QuerySpec) -> RecallSoFar:
    return recall_so_far(state.curated_ids(), state.shown_ids, query)
