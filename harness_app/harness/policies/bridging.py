"""Bridging, hop by hop: from the documents an episode found to the next hop's article.

A compositional question ("the founder of the firm that published the novel X") names only
its first hop. X's article names the firm, the firm's article names the founder, and the
founder's article, the answer, shares hardly a word with the question, so no search with
the question's words reaches it. What reaches it is the entity the previous hop's article
names. The baseline therefore walks the chain: from the frontier (the question's best hits
first, then the articles each round found) it takes the entities the question does not
name, ranks them, and looks up the article titled after each.

Ranking a frontier document's entities:

- each frontier document carries a weight, how likely it is on the question's chain
  (its evidence score against the best one, or the score of the entity whose article it
  is), and shares it among the entities it names in proportion to their link strength;
  so a deeper hop weighs less than the one before, unless its link clearly stands out;
- link strength: a kind weight (names and quoted works over acronyms; years and numbers
  never), times 1 + `cue_weight` x the question terms that the sentence naming the entity
  shares with the question (beyond the entity's own words), "It was published by Y"
  being a cue for "the firm that published X" (real questions repeat some relation
  words and paraphrase others), over 1 + `position_decay` x (n - 1) for the document's
  n-th entity, since articles name their subject's closest links first.

The lookup is a `grep_corpus` call anchored at the title, which the harness scans as
"title\\ntext": it shows only the articles titled after the entities (with or without a
"(1945 film)" disambiguator), a handful of documents, where a search per entity shows ten
each. Everything here is a pure function of the state, ordered by list position or id.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from harness_app.harness.policies.evidence import (
    Candidate,
    doc_entities,
    names_entity,
    question_entities,
    title_key,
)
from harness_app.harness.state import HarnessState
from harness_app.harness.text import ENGLISH_STOP_WORDS, analyze, split_sentences, words

_KIND_WEIGHT = {"name": 1.0, "work": 1.0, "acronym": 0.5}
_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)
# grep_corpus matches "title\ntext"; this suffix accepts "Title" and "Title (1945 film)".
_TITLE_SUFFIX = r"(?: \([^)\n]*\))?\n"
_TITLE_PREFIX = r"\A(?:The |A |An )?(?:"
_CONNECTORS = frozenset({"of", "the", "and", "&", "de", "la", "for", "in", "on", "a"})
_CAPITALISED_RUN = re.compile(
    r"[A-Z0-9][\w'’.&-]*(?:\s+(?:(?:of|the|and|&|de|la|for|in|on|a)\s+)*[A-Z0-9][\w'’.&-]*)*"
)
# Capitalised only because they open the question or a clause.
_OPENER_TEXT = """
what which who whom whose when where why how did does do was were is are the a an in on at
of for from by as and or if has have had can could would will
"""
_SPAN_OPENERS = frozenset(_OPENER_TEXT.split())


@dataclass(frozen=True, slots=True)
class BridgeWeights:
    """How a frontier document's entities are ranked for the next lookup."""

    cue_weight: float = 1.0  # per question term shared by the sentence naming the entity
    position_decay: float = 0.0  # the n-th entity named weighs 1/(1 + decay(n-1)); 0.2 did worse
    max_question_overlap: float = 0.75  # entities this much inside the question are not bridges


def question_terms(question: str) -> frozenset[str]:
    """The question's analysed terms (stemmed, no stop words), for cue matching."""
    return frozenset(analyze(question))


def mention_cue(text: str, label: str, terms: Collection[str]) -> int:
    """Question terms in the sentences of `text` that name `label`, the label's own aside."""
    if not text or label not in text:
        return 0
    own = set(analyze(label))
    shared: set[str] = set()
    for sentence in split_sentences(text):
        if label in sentence:
            shared.update(t for t in analyze(sentence) if t in terms and t not in own)
    return len(shared)


def _overlap(key: str, question_words: set[str]) -> float:
    entity_words = [w for w in key.split() if w not in ENGLISH_STOP_WORDS]
    if not entity_words:
        return 1.0
    return sum(1 for w in entity_words if w in question_words) / len(entity_words)


def bridge_candidates(
    state: HarnessState,
    question: str,
    frontier: Sequence[tuple[str, float]],
    full_texts: dict[str, str],
    followed: Collection[str],
    weights: BridgeWeights | None = None,
) -> list[Candidate]:
    """Entities of the frontier documents worth looking up next, best first.

    `frontier` is (doc id, weight) pairs, the weight being how likely the document is on
    the question's chain; `followed` are entity keys already looked up (never proposed
    twice). Each document shares its weight among the entities it names, in proportion to
    their link strength, so a score reads as "how likely this entity is the next hop"; an
    entity several frontier documents name adds up.
    """
    weights = weights or BridgeWeights()
    question_words = set(words(question))
    terms = question_terms(question)
    scores: dict[str, float] = {}
    labels: dict[str, str] = {}
    for doc_id, doc_weight in frontier:
        links = _links(state, doc_id, full_texts, question_words, terms, weights)
        total = sum(strength for _, _, strength in links)
        for key, label, strength in links:
            if key in followed or total <= 0:
                continue
            scores[key] = scores.get(key, 0.0) + doc_weight * strength / total
            labels.setdefault(key, label)
    ordered = sorted(scores, key=lambda k: -scores[k])  # stable: first seen wins ties
    return [Candidate(k, labels[k], scores[k], in_question=False) for k in ordered]


def _links(
    state: HarnessState,
    doc_id: str,
    full_texts: dict[str, str],
    question_words: set[str],
    terms: frozenset[str],
    weights: BridgeWeights,
) -> list[tuple[str, str, float]]:
    """(key, label, strength) of each entity a shown document links to."""
    entry = state.memory.get(doc_id)
    if entry is None:
        return []
    own = title_key(entry.title)
    text = full_texts.get(doc_id, entry.snippet)
    links: list[tuple[str, str, float]] = []
    for key, label, kind in doc_entities(state, doc_id, full_texts):
        kind_weight = _KIND_WEIGHT.get(kind, 0.0)
        if kind_weight == 0 or key == own:
            continue
        if _overlap(key, question_words) >= weights.max_question_overlap:
            continue
        cue = mention_cue(text, label, terms)
        position = 1 + weights.position_decay * len(links)
        links.append((key, label, kind_weight * (1 + weights.cue_weight * cue) / position))
    return links


def unseen_question_entities(state: HarnessState, question: str) -> list[Candidate]:
    """Entities the question names whose article no shown document is titled after.

    Besides the evidence graph's names (two words or more), every capitalised span of the
    question counts, one word included: comparison questions name their subjects bare
    ("Which band formed earlier, Echosmith or Fireflight?"), and the subjects' articles
    are what such a question needs.
    """
    found = {c.key: c for c in question_entities(question)}
    for span in question_spans(question):
        key = title_key(span)
        found.setdefault(key, Candidate(key, span, 1.0, in_question=True))
    return [c for c in found.values() if not titled_docs(state, c.key)]


def question_spans(question: str) -> list[str]:
    """Runs of capitalised words in the question, without the question words opening it."""
    spans = []
    for match in _CAPITALISED_RUN.finditer(question):
        parts = match.group().split()
        while parts and parts[0].lower() in _SPAN_OPENERS:
            parts.pop(0)
        while parts and parts[-1].lower() in _CONNECTORS:
            parts.pop()
        span = " ".join(parts).strip(" .,:;")
        # "Local H and For Against" is two names as often as one ("Tom and Jerry").
        pieces = [p.strip() for p in span.split(" and ")] if " and " in span else []
        for piece in [span, *pieces]:
            if len(piece) >= 3 and piece not in spans:
                spans.append(piece)
    return spans


def titled_docs(state: HarnessState, key: str) -> list[str]:
    """Every shown document titled after the entity `key`, in the order first shown."""
    return [d for d, entry in state.memory.items() if names_entity(entry.title, key)]


def title_lookup_patterns(labels: Sequence[str], max_chars: int) -> list[tuple[str, list[str]]]:
    """grep_corpus patterns matching documents titled after the labels, and the labels each
    one covers; labels are packed into as few patterns of at most `max_chars` as fit.

    A label too long for any pattern, or empty once its leading article is dropped, is
    left out.
    """
    patterns: list[tuple[str, list[str]]] = []
    current: list[str] = []
    for label in labels:
        bare = _LEADING_ARTICLE.sub("", label).strip()
        if not bare:
            continue
        if current and len(_title_pattern([*current, bare])) > max_chars:
            patterns.append((_title_pattern(current), current))
            current = []
        if len(_title_pattern([bare])) <= max_chars:
            current.append(bare)
    if current:
        patterns.append((_title_pattern(current), current))
    return patterns


def _title_pattern(labels: Sequence[str]) -> str:
    return _TITLE_PREFIX + "|".join(re.escape(label) for label in labels) + ")" + _TITLE_SUFFIX


def found_articles(state: HarnessState, candidates: Sequence[Candidate]) -> list[tuple[str, float]]:
    """(doc id, entity score) of the shown articles titled after the candidates, best
    entity first; a document titled after two candidates keeps the better score."""
    found: dict[str, float] = {}
    for candidate in candidates:
        for doc_id in titled_docs(state, candidate.key):
            found.setdefault(doc_id, candidate.score)
    return list(found.items())
