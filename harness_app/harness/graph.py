"""The evidence graph G: regex-extracted entities linking the documents shown in an episode.

Entities are found with cheap regular expressions, no NER model, so the graph costs a few
microseconds per document and behaves the same in every worker:

- ``name``: runs of two or more capitalised words, allowing lower-case connectors inside
  ("University of California", "Chief of Protocol of the United States"); sentence-opening
  function words ("The", "In", "After", ...) are trimmed from the front, and a span that
  contains connectors also yields its two-word-or-longer pieces ("United States"). The
  document's own title (without a trailing "(disambiguation)") is always a ``name`` of it.
- ``acronym``: 2-6 capital letters ("CBS", "NASA"), minus Roman numerals and "TV".
- ``work``: text in straight or curly double quotes, 2-80 characters (song, film and book
  titles in Wikipedia prose).
- ``year``: 1500-2099 standing alone.
- ``number``: numbers with thousands separators ("3,677") or followed by
  million/billion/thousand; the key drops separators so "3,677" matches "3677".

Keys are lower-cased with possessives and a leading article removed ("A Kiss for Corliss"
and "Kiss for Corliss" are one entity). At most
`MAX_ENTITIES_PER_DOC` per document, preferring titles, works and names. Known gap: single
capitalised words ("Hollywood") are not entities, because without a tagger they are
indistinguishable from sentence openings and nationalities.

A *bridge* is an entity that appears in two or more documents; it is what multi-hop
questions hinge on, so the working memory lists the strongest ones.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from harness_app.harness.types import Document, JSONObject

MAX_ENTITIES_PER_DOC = 24
ENTITY_KINDS = ("name", "work", "acronym", "number", "year")
# Weaker kinds link many unrelated documents, so they rank below names in the WM.
_KIND_PRIORITY = {"name": 0, "work": 0, "acronym": 1, "number": 2, "year": 3}

_UPPER = "A-ZÀ-ÖØ-Þ"
# A capitalised word, or an initial ("F." in "F. Hugh Herbert"); a full stop after a longer
# word ends the sentence, so it must not glue two sentences into one name.
_CAP_WORD = rf"(?:\b[{_UPPER}]\.|[{_UPPER}][\w'’\-]*)"
_CONNECTORS = r"(?:of|the|de|del|della|da|di|du|la|le|von|van|der|den|y|for)"
# No look-behind for a word start: it triples the cost, and a left-to-right scan already
# consumes "McDonald" whole before it could start a name at the inner "D".
_NAME_RE = re.compile(rf"{_CAP_WORD}(?:\s+(?:{_CONNECTORS}\s+)*{_CAP_WORD})+")
_CONNECTOR_SPLIT_RE = re.compile(rf"\s+{_CONNECTORS}\s+(?:{_CONNECTORS}\s+)*")
_ACRONYM_RE = re.compile(r"(?<![\w'’])([A-Z]{2,6})(?:['’]s)?(?![\w'’])")
_WORK_RE = re.compile(r"\"([^\"\n]{2,80})\"|“([^”\n]{2,80})”")
# One cheap pass over digit runs; years and numbers are told apart in Python.
_DIGITS_RE = re.compile(r"\d[\d,.]*(?:\s+(?:million|billion|thousand))?")
_YEAR_RE = re.compile(r"(?:1[5-9]\d\d|20\d\d)")
_GROUPED_RE = re.compile(r"\d{1,3}(?:,\d{3})+")
_PAREN_RE = re.compile(r"\s*\([^)]*\)\s*$")
_POSSESSIVE_RE = re.compile(r"['’]s\b")

# Capitalised only because they open a sentence; trimmed from the front of a name span.
_OPENER_WORDS = """
The A An In On At From He She It His Her Its They Their This That These Those As By For
After Before During When While Although Though Despite However There Since Until With
Without Of To And But Or If Following Born Meanwhile Both Also According Each Some Many
Most All Other One We I Our Then Later Today Currently Unlike Like Under Over Upon
Between Among Through Throughout Within Along Is Was Were Are
"""
_OPENERS = frozenset(_OPENER_WORDS.split())
_ARTICLES = ("the ", "a ", "an ")
_ACRONYM_STOP = frozenset({"II", "III", "IV", "VI", "VII", "VIII", "IX", "XI", "XII", "TV"})


class Mention(NamedTuple):
    """One entity of a document (a tuple: cheap to build, whether extracted or read)."""

    key: str
    label: str
    kind: str


def entity_key(label: str) -> str:
    """Normalise a surface form so different mentions of one entity share a key."""
    key = _POSSESSIVE_RE.sub("", label.lower())
    key = " ".join(key.replace("’", "'").split()).strip(" .,'")
    for article in _ARTICLES:
        if key.startswith(article):
            return key[len(article) :]
    return key


@lru_cache(maxsize=16_384)
def extract_entities(doc: Document) -> tuple[Mention, ...]:
    """The document's entity mentions, deduplicated by key, capped, best kinds first.

    Cached per document content: the extraction depends on nothing else, so episodes with
    different ablations can safely share the cache.
    """
    found: dict[str, Mention] = {}
    title = _PAREN_RE.sub("", doc.title).strip()
    if title:
        _remember(found, title, "name")
    for match in _WORK_RE.finditer(doc.text):
        _remember(found, match.group(1) or match.group(2), "work")
    for label in _names(doc.text):
        _remember(found, label, "name")
    for match in _ACRONYM_RE.finditer(doc.text):
        if match.group(1) not in _ACRONYM_STOP:
            _remember(found, match.group(1), "acronym")
    numbers, years = _numbers(doc.text)
    for label in numbers:
        _remember(found, label, "number")
    for label in years:
        _remember(found, label, "year")
    return tuple(found.values())[:MAX_ENTITIES_PER_DOC]


def _numbers(text: str) -> tuple[list[str], list[str]]:
    numbers, years = [], []
    for match in _DIGITS_RE.finditer(text):
        token = match.group().rstrip(",.")
        if _YEAR_RE.fullmatch(token):
            years.append(token)
        elif _GROUPED_RE.fullmatch(token) or token.endswith(("million", "billion", "thousand")):
            numbers.append(token)
    return numbers, years


def _remember(found: dict[str, Mention], label: str, kind: str) -> None:
    label = label.strip()
    key = _number_key(label) if kind == "number" else entity_key(label)
    if len(key) >= 2 and key not in found:
        found[key] = Mention(key, label, kind)


def _number_key(label: str) -> str:
    return label.replace(",", "").lower()


def _names(text: str) -> list[str]:
    names: list[str] = []
    for match in _NAME_RE.finditer(text):
        words = match.group().split()
        while words and words[0] in _OPENERS:
            words.pop(0)
        if len(words) < 2:
            continue
        span = " ".join(words).rstrip(".")
        names.append(span)
        pieces = _CONNECTOR_SPLIT_RE.split(span)
        if len(pieces) > 1:
            names.extend(p for p in pieces if len(p.split()) >= 2)
    return names


@dataclass(slots=True)
class Entity:
    key: str
    label: str
    kind: str
    doc_ids: list[str]
    first_turn: int

    def to_json(self) -> JSONObject:
        return {
            "key": self.key,
            "label": self.label,
            "kind": self.kind,
            "doc_ids": list(self.doc_ids),
            "first_turn": self.first_turn,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entity:
        return cls(
            key=data["key"],
            label=data["label"],
            kind=data["kind"],
            doc_ids=list(data["doc_ids"]),
            first_turn=data["first_turn"],
        )


def _strength(entity: Entity) -> tuple[int, int, int]:
    return (_KIND_PRIORITY.get(entity.kind, 9), -len(entity.doc_ids), entity.first_turn)


@dataclass(slots=True)
class GraphDoc:
    doc_id: str
    title: str
    turn: int  # the turn its edges appeared, so the UI can replay the graph turn by turn
    entity_keys: list[str]


@dataclass(slots=True)
class EvidenceGraph:
    """Bipartite graph: document nodes, entity nodes, doc–entity edges.

    `bridges` lists entity keys in the order they first reached two documents; it is kept
    incrementally so the working memory never scans every entity. The episode viewer draws
    the graph from `to_json()` (trajectories/selectors/graph.py); nothing here projects it.
    """

    entities: dict[str, Entity] = field(default_factory=dict)
    docs: dict[str, GraphDoc] = field(default_factory=dict)
    bridges: list[str] = field(default_factory=list)

    def add_document(
        self, doc: Document, turn: int, mentions: Sequence[Mention] | None = None
    ) -> None:
        """Add `doc`'s node and edges; `mentions` are its entities if already extracted
        (e.g. read from the index), else `extract_entities(doc)`."""
        if doc.doc_id in self.docs:
            return
        if mentions is None:
            mentions = extract_entities(doc)
        self.docs[doc.doc_id] = GraphDoc(doc.doc_id, doc.title, turn, [m.key for m in mentions])
        for mention in mentions:
            entity = self.entities.get(mention.key)
            if entity is None:
                self.entities[mention.key] = Entity(
                    mention.key, mention.label, mention.kind, [doc.doc_id], turn
                )
                continue
            entity.doc_ids.append(doc.doc_id)
            if len(entity.doc_ids) == 2:
                self.bridges.append(mention.key)

    def top_bridges(self, curated: Collection[str], limit: int) -> list[Entity]:
        """Bridges ranked by curated docs linked, then kind strength, then docs linked.

        Runs every turn, so it avoids a full sort: bridges touching the curated set are
        found through the curated docs' own entities, the rest by a partial selection.
        """
        curated_counts: dict[str, int] = {}
        for doc_id in curated:
            doc = self.docs.get(doc_id)
            for key in doc.entity_keys if doc else ():
                curated_counts[key] = curated_counts.get(key, 0) + 1
        linked = [self.entities[k] for k in curated_counts if len(self.entities[k].doc_ids) > 1]
        linked.sort(key=lambda e: (-curated_counts[e.key], *_strength(e)))
        if len(linked) >= limit:
            return linked[:limit]
        rest = (self.entities[k] for k in self.bridges if k not in curated_counts)
        return linked + heapq.nsmallest(limit - len(linked), rest, key=_strength)

    def entities_of(self, doc_id: str) -> list[Entity]:
        doc = self.docs.get(doc_id)
        return [] if doc is None else [self.entities[k] for k in doc.entity_keys]

    def to_json(self) -> JSONObject:
        return {
            "entities": {k: e.to_json() for k, e in self.entities.items()},
            "docs": {
                d.doc_id: {"title": d.title, "turn": d.turn, "entity_keys": list(d.entity_keys)}
                for d in self.docs.values()
            },
            "bridges": list(self.bridges),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvidenceGraph:
        return cls(
            entities={k: Entity.from_json(v) for k, v in data["entities"].items()},
            docs={
                doc_id: GraphDoc(doc_id, v["title"], v["turn"], list(v["entity_keys"]))
                for doc_id, v in data["docs"].items()
            },
            bridges=list(data["bridges"]),
        )
