"""What the baseline policy reads out of the harness state: entities, follow-ups, a ranking.

Multi-hop questions name the first hop ("the film Kiss and Tell") and hide the second
("the woman who portrayed Corliss Archer" = Shirley Temple). The first hop's document
names the hidden entity, so the entities of the top question hits that the question does
*not* already mention are the candidates for the next search, and the document titled
after such an entity is very likely the one the question is really about.

Everything here is a pure function of the state and the question, with ties broken by
list order or by id, so the same episode always yields the same plan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness_app.harness.graph import entity_key, extract_entities
from harness_app.harness.state import HarnessState
from harness_app.harness.text import ENGLISH_STOP_WORDS, words
from harness_app.harness.tools import SEARCH_TOOLS
from harness_app.harness.types import Document

# Years and bare numbers link unrelated documents; they make poor follow-up queries.
_KIND_WEIGHT = {"name": 1.0, "work": 1.0, "acronym": 0.5}
_PAREN_SUFFIX = re.compile(r"\s*\([^)]*\)\s*$")
_QUESTION_WORDS = frozenset(
    {"what", "which", "who", "whom", "whose", "when", "where", "why", "how"}
    | {"did", "does", "do", "was", "were", "is", "are"}
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entity worth searching for, or already linked to a shown document."""

    key: str
    label: str
    score: float
    in_question: bool  # named by the question itself (comparison questions name both)


def content_words(text: str) -> list[str]:
    """Lower-cased words minus stop words and question words, in order, without repeats."""
    skip = ENGLISH_STOP_WORDS | _QUESTION_WORDS
    return list(dict.fromkeys(w for w in words(text) if w not in skip and len(w) > 1))


def title_key(title: str) -> str:
    """Entity key of a document title without its "(1945 film)"-style disambiguator."""
    return entity_key(_PAREN_SUFFIX.sub("", title))


def _question_record(state: HarnessState) -> int:
    """Index in state.searches of the first search that showed anything, or -1."""
    for index, record in enumerate(state.searches):
        if record.tool in SEARCH_TOOLS and record.hit_ids:
            return index
    return -1


def question_hits(state: HarnessState) -> list[str]:
    """Doc ids of the first fruitful search, in rank order: the question's own ranking."""
    index = _question_record(state)
    return list(state.searches[index].hit_ids) if index >= 0 else []


def doc_entities(
    state: HarnessState, doc_id: str, full_texts: dict[str, str]
) -> list[tuple[str, str, str]]:
    """(key, label, kind) of a shown document's entities.

    The evidence graph has them when that mechanism is on; otherwise they are extracted
    from what the policy was shown (the full text if it read the document, else the
    snippet in document memory), as an LLM reading the transcript would.
    """
    graph_entities = state.graph.entities_of(doc_id)
    if graph_entities:
        return [(e.key, e.label, e.kind) for e in graph_entities]
    entry = state.memory.get(doc_id)
    if entry is None:
        return []
    text = full_texts.get(doc_id, entry.snippet)
    return [(m.key, m.label, m.kind) for m in extract_entities(Document(doc_id, entry.title, text))]


def _overlap(key: str, question_words: set[str]) -> float:
    entity_words = [w for w in key.split() if w not in ENGLISH_STOP_WORDS]
    if not entity_words:
        return 1.0
    return sum(1 for w in entity_words if w in question_words) / len(entity_words)


def question_entities(question: str) -> list[Candidate]:
    """Named entities and quoted works that the question itself mentions.

    A capitalised question word opening the question ("Which British ...") is not part of
    the name; a name left with one word is dropped as too vague to search for.
    """
    found: dict[str, Candidate] = {}
    for mention in extract_entities(Document("question", "", question)):
        if mention.kind not in ("name", "work"):
            continue
        label = mention.label
        if mention.kind == "name":
            parts = label.split()
            while parts and parts[0].lower() in _QUESTION_WORDS:
                parts.pop(0)
            if len(parts) < 2:
                continue
            label = " ".join(parts)
        key = entity_key(label)
        found.setdefault(key, Candidate(key, label, 1.0, in_question=True))
    return list(found.values())


def names_entity(title: str, key: str) -> bool:
    """Whether a document title names a bridge entity: equal keys, or every word of a
    title of two or more words inside the entity ("Bill Clinton" for "united states
    president bill clinton", "George V" for "king george v").

    The looser reverse (entity inside title) is left out on purpose: it tied "Teen Titans"
    to every "Teen Titans (season n)" article and cost four points of recall@5 on
    hotpotqa-dev500.
    """
    tkey = title_key(title)
    if tkey == key:
        return True
    title_words = set(tkey.split())
    return len(title_words) >= 2 and title_words <= set(key.split())


def novel_entities(
    state: HarnessState, question: str, hop_docs: Sequence[str], full_texts: dict[str, str]
) -> list[Candidate]:
    """Entities of the top question hits that the question does not name, best first.

    Score: sum over the hop documents that mention the entity of 1/rank, times a kind
    weight, so an entity named by the top hit, or by several hits, comes first.
    """
    question_words = {w for w in words(question)}
    scores: dict[str, float] = {}
    labels: dict[str, str] = {}
    for rank, doc_id in enumerate(hop_docs, 1):
        own = title_key(state.memory[doc_id].title) if doc_id in state.memory else ""
        for key, label, kind in doc_entities(state, doc_id, full_texts):
            weight = _KIND_WEIGHT.get(kind, 0.0)
            if weight == 0 or key == own or _overlap(key, question_words) >= 0.5:
                continue
            scores[key] = scores.get(key, 0.0) + weight / rank
            labels.setdefault(key, label)
    ordered = sorted(scores, key=lambda k: -scores[k])  # stable: first-seen wins ties
    return [Candidate(k, labels[k], scores[k], in_question=False) for k in ordered]


def titled_doc(state: HarnessState, key: str) -> str | None:
    """The shown document titled after the entity `key`, if any."""
    for doc_id, entry in state.memory.items():
        if names_entity(entry.title, key):
            return doc_id
    return None


def follow_up_query(candidate: Candidate, question: str, max_context_words: int) -> str:
    """The entity plus the question's content words it does not already contain.

    The entity pulls up its own article; the question words make the one that answers the
    question win among the documents that merely mention the entity.
    """
    if candidate.in_question or max_context_words == 0:
        return candidate.label
    entity_words = set(words(candidate.label))
    context = [w for w in content_words(question) if w not in entity_words]
    return " ".join([candidate.label, *context[:max_context_words]])


@dataclass(frozen=True, slots=True)
class RankWeights:
    """How much each kind of evidence counts when ranking shown documents."""

    question_search: float = 1.0
    follow_up_search: float = 0.2  # follow-up hits are mostly noise unless titled (below)
    entity_title: float = (
        1.0  # the doc is the article of a bridge entity (0.5 before hop-by-hop bridging)
    )
    question_title: float = 1.0  # the doc is the article of an entity the question names (0.4)
    rank_offset: float = 3.0  # 1/(rank + 3): flatter than 1/rank, so rank 2-4 still count


def rank_documents(
    state: HarnessState,
    question: str,
    entity_scores: dict[str, float],
    weights: RankWeights,
) -> list[tuple[str, float]]:
    """Every shown, non-suppressed document with its evidence score, best first.

    A reciprocal-rank vote from each search (the question's own search counts most), plus
    a bonus for being the article of a follow-up entity (scaled by that entity's score
    relative to the best one) or of an entity the question names.
    """
    scores: dict[str, float] = dict.fromkeys(state.memory, 0.0)
    question_index = _question_record(state)
    for index, record in enumerate(state.searches):
        if record.tool not in SEARCH_TOOLS:
            continue
        own = index == question_index
        weight = weights.question_search if own else weights.follow_up_search
        for rank, doc_id in enumerate(record.hit_ids, 1):
            if doc_id in scores:
                scores[doc_id] += weight / (rank + weights.rank_offset)
    _add_title_bonuses(state, question, entity_scores, weights, scores)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def _add_title_bonuses(
    state: HarnessState,
    question: str,
    entity_scores: dict[str, float],
    weights: RankWeights,
    scores: dict[str, float],
) -> None:
    best = max(entity_scores.values(), default=0.0)
    question_keys = [c.key for c in question_entities(question)]
    for doc_id, entry in state.memory.items():
        linked = [v for k, v in entity_scores.items() if names_entity(entry.title, k)]
        if best and linked:
            scores[doc_id] += weights.entity_title * max(linked) / best
        # Exact title match only: see names_entity on why looser matching hurts here.
        if title_key(entry.title) in question_keys:
            scores[doc_id] += weights.question_title
