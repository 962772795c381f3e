"""The evidence graph of an episode as the viewer draws it, and how it grew turn by turn.

Read straight from the final state's graph JSON (`HarnessState.graph.to_json()`): documents
carry the turn they were added and entities the documents they appear in, so the graph as
of any turn is a filter of the final one: doc and bridge-entity nodes dated by turn, and
doc–entity edges. There is no doc–doc link list: it costs O(documents²) per bridge and the
drawing does not use it (for a 500-document episode that list alone took 100 ms).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

# Bridges drawn at most; the growth statistics always count every one. A 500-document
# episode has over a thousand bridges (years and numbers link many documents), which no
# one can read in a drawing and which make the browser's layout quadratic.
MAX_DRAWN_BRIDGES = 200
# As in the working memory's BRIDGES line: names and titles of works first, then acronyms,
# numbers, years.
KIND_RANK = {"name": 0, "work": 0, "acronym": 1, "number": 2, "year": 3}


class Grades(Protocol):
    @property
    def relevant(self) -> list[str]: ...

    def grade(self, doc_id: str) -> int | None: ...


def _find(parent: list[int], node: int) -> int:
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def graph_growth(graph: Mapping[str, Any], gold: Grades, last_turn: int) -> list[dict[str, int]]:
    """Per turn: documents, bridges, connected components of documents (linked through
    bridges), the largest one, and gold documents reached and linked (sharing a component
    with another gold document).

    A bridge lists its documents in the order they were added, so it links its k-th
    document to its first in the turn the k-th arrived (the turn its doc–entity edge
    appears). One union-find pass over those links in turn order: linear in the graph,
    not turns × graph.
    """
    docs = graph.get("docs", {})
    entities = graph.get("entities", {})
    number = {doc_id: i for i, doc_id in enumerate(docs)}
    turn_of = [int(d["turn"]) for d in docs.values()]
    links: dict[int, list[tuple[int, int]]] = {}
    bridges_at: Counter[int] = Counter()
    for key in graph.get("bridges", []):
        ids = [number[d] for d in entities.get(key, {}).get("doc_ids", []) if d in number]
        if len(ids) < 2:
            continue
        formed = max(turn_of[ids[0]], turn_of[ids[1]])
        bridges_at[formed] += 1
        for other in ids[1:]:
            links.setdefault(max(formed, turn_of[other]), []).append((ids[0], other))
    gold_ids = [number[d] for d in gold.relevant if d in number]
    return _growth(turn_of, links, bridges_at, gold_ids, last_turn)


def _growth(
    turn_of: list[int],
    links: dict[int, list[tuple[int, int]]],
    bridges_at: Counter[int],
    gold_ids: list[int],
    last_turn: int,
) -> list[dict[str, int]]:
    parent, size = list(range(len(turn_of))), [1] * len(turn_of)
    arrivals = Counter(turn_of)
    docs = bridges = components = largest = 0
    stats = []
    for turn in range(last_turn + 1):
        docs += arrivals[turn]
        components += arrivals[turn]
        bridges += bridges_at[turn]
        largest = max(largest, 1 if docs else 0)
        for a, b in links.get(turn, ()):
            ra, rb = _find(parent, a), _find(parent, b)
            if ra != rb:
                ra, rb = (ra, rb) if size[ra] >= size[rb] else (rb, ra)
                parent[rb], size[ra] = ra, size[ra] + size[rb]
                components -= 1
                largest = max(largest, size[ra])
        reached = [g for g in gold_ids if turn_of[g] <= turn]
        roots = Counter(_find(parent, g) for g in reached)
        stats.append(
            {
                "turn": turn,
                "docs": docs,
                "bridges": bridges,
                "components": components,
                "largest": largest,
                "gold_reached": len(reached),
                "gold_linked": sum(n for n in roots.values() if n > 1),
            }
        )
    return stats


def _drawn_bridges(graph: Mapping[str, Any], keep: set[str]) -> list[str]:
    """The bridges worth drawing: those touching curated or gold documents first, then by
    kind and by how many documents they link."""
    docs, entities = graph.get("docs", {}), graph.get("entities", {})

    def strength(key: str) -> tuple[int, int, int]:
        entity = entities[key]
        ids = [d for d in entity["doc_ids"] if d in docs]
        return (0 if keep.intersection(ids) else 1, KIND_RANK.get(entity["kind"], 9), -len(ids))

    bridges = [k for k in graph.get("bridges", []) if k in entities]
    return sorted(bridges, key=strength)[:MAX_DRAWN_BRIDGES]


def graph_data(final: Mapping[str, Any], gold: Grades, last_turn: int) -> dict[str, Any]:
    """What the viewer's graph needs: drawn nodes and edges (compact), growth per turn.

    Nodes are dicts; edges are [source index, target index, turn] triples, which keeps a
    graph of thousands of edges small on the page. Documents with no drawn bridge are left
    out of the drawing unless curated or gold, but counted in the growth statistics.
    """
    graph = final.get("graph") or {}
    docs, entities = graph.get("docs", {}), graph.get("entities", {})
    curated = set(final.get("curated", {}))
    relevant = set(gold.relevant)
    drawn = _drawn_bridges(graph, curated | relevant)
    nodes: list[dict[str, Any]] = []
    index: dict[str, int] = {}

    def node(node_id: str, **fields: Any) -> int:
        if node_id not in index:
            index[node_id] = len(nodes)
            nodes.append({"id": node_id, **fields})
        return index[node_id]

    def doc_node(doc_id: str) -> int:
        return node(
            f"doc:{doc_id}",
            type="doc",
            label=docs[doc_id]["title"] or doc_id,
            turn=docs[doc_id]["turn"],
            curated=doc_id in curated,
            grade=gold.grade(doc_id),
        )

    for doc_id in docs:
        if doc_id in curated or doc_id in relevant:
            doc_node(doc_id)
    edges: list[list[int]] = []
    for key in drawn:
        entity = entities[key]
        ids = [d for d in entity["doc_ids"] if d in docs]
        turn = docs[ids[1]]["turn"]
        target = node(
            f"ent:{key}", type="entity", label=entity["label"], kind=entity["kind"], turn=turn
        )
        edges.extend([doc_node(d), target, max(docs[d]["turn"], turn)] for d in ids)
    return {
        "nodes": nodes,
        "edges": edges,
        "growth": graph_growth(graph, gold, last_turn),
        "gold_total": len(relevant),
        "bridges_total": len(graph.get("bridges", [])),
        "bridges_drawn": len(drawn),
        "enabled": bool(docs),
    }
