"""Evidence graph: regex entities, bridges across documents, and the view the viewer draws."""

from __future__ import annotations

from collections.abc import Collection

from harness_app.harness.graph import EvidenceGraph, extract_entities
from harness_app.harness.types import Document
from tests.harness.fakes import DOCS, call, make_env

# The projection the pages draw; a pure module, so no database is needed.
from trajectories.selectors.graph import graph_data

BY_ID = {d.doc_id: d for d in DOCS}


def _kinds(doc: Document) -> dict[str, str]:
    return {m.label: m.kind for m in extract_entities(doc)}


def test_extracts_names_works_years_numbers_and_the_title():
    found = _kinds(BY_ID["Luigi_Menabrea"])
    assert found["Luigi Federico Menabrea"] == "name"
    assert found["Sketch of the Analytical Engine"] == "work"
    assert found["Prime Minister of Italy"] == "name" and found["Prime Minister"] == "name"
    assert found["1842"] == "year"
    museum = _kinds(BY_ID["Science_Museum_London"])
    assert museum["3,300,000"] == "number" and museum["Exhibition Road"] == "name"
    assert _kinds(BY_ID["Harvard_Mark_I"])["IBM"] == "acronym"


def test_sentence_openers_are_trimmed_and_sentences_are_not_glued():
    doc = Document(
        "x",
        "",
        "In Paris Texas the band played. The Big Band Era ended. CBS. Then Alan Turing left.",
    )
    labels = set(_kinds(doc))
    assert "Paris Texas" in labels and "Big Band Era" in labels and "Alan Turing" in labels
    assert not any(label.startswith(("In ", "The ", "Then ")) for label in labels)
    assert not any("CBS." in label for label in labels)


def test_bridges_are_entities_in_two_or_more_documents():
    graph = EvidenceGraph()
    graph.add_document(BY_ID["Luigi_Menabrea"], 1)
    assert graph.bridges == []
    graph.add_document(BY_ID["Ada_Lovelace"], 2)
    assert "sketch of the analytical engine" in graph.bridges
    assert "ada lovelace" in graph.bridges
    bridge = graph.entities["ada lovelace"]
    assert bridge.doc_ids == ["Luigi_Menabrea", "Ada_Lovelace"]
    assert "luigi federico menabrea" not in graph.bridges


def test_top_bridges_prefer_entities_linking_curated_docs():
    graph = EvidenceGraph()
    for turn, doc_id in enumerate(
        ["Alan_Turing", "Bletchley_Park", "Ada_Lovelace", "Luigi_Menabrea"]
    ):
        graph.add_document(BY_ID[doc_id], turn)
    top = graph.top_bridges(curated={"Ada_Lovelace", "Luigi_Menabrea"}, limit=1)[0]
    assert set(top.doc_ids) == {"Ada_Lovelace", "Luigi_Menabrea"}


def test_view_has_doc_and_entity_nodes_edges_and_connected_docs():
    graph = EvidenceGraph()
    graph.add_document(BY_ID["Alan_Turing"], 1)
    graph.add_document(BY_ID["Bletchley_Park"], 2)
    nodes, edges = _drawn(graph, curated={"Alan_Turing"})
    assert {"doc:Alan_Turing", "doc:Bletchley_Park", "ent:alan turing"} <= set(nodes)
    assert ("doc:Bletchley_Park", "ent:alan turing", 2) in edges
    linked_by_war = {source for source, target, _ in edges if target == "ent:second world war"}
    assert linked_by_war == {"doc:Alan_Turing", "doc:Bletchley_Park"}
    assert nodes["doc:Alan_Turing"]["curated"]


def test_env_renders_bridges_in_working_memory_and_round_trips_the_graph():
    env = make_env()
    obs = env.step(
        [call("search_corpus", {"query": "Sketch of the Analytical Engine translated Menabrea"})]
    )
    assert "BRIDGES:" in obs.working_memory and "Ada Lovelace [" in obs.working_memory
    assert EvidenceGraph.from_json(env.state.graph.to_json()) == env.state.graph


def test_view_as_of_an_earlier_turn_replays_the_graph():
    graph = EvidenceGraph()
    graph.add_document(BY_ID["Alan_Turing"], 1)
    graph.add_document(BY_ID["Bletchley_Park"], 3)
    early_nodes, early_edges = _drawn(graph, as_of=2)
    assert list(early_nodes) == ["doc:Alan_Turing"]
    assert early_edges == []
    late_nodes, _ = _drawn(graph, as_of=3)
    assert late_nodes["ent:alan turing"]["turn"] == 3


class _NoGold:
    relevant: list[str] = []

    def grade(self, doc_id: str) -> int | None:
        return None


def _drawn(
    graph: EvidenceGraph, *, curated: Collection[str] = (), as_of: int | None = None
) -> tuple[dict[str, dict], list[tuple[str, str, int]]]:
    """The graph as the episode viewer draws it, as of a turn as its slider replays it:
    nodes by id, and edges as (source id, target id, turn)."""
    last = max(d.turn for d in graph.docs.values())
    final = {"graph": graph.to_json(), "curated": dict.fromkeys(curated)}
    data = graph_data(final, _NoGold(), last_turn=last)
    shown = [n for n in data["nodes"] if as_of is None or n["turn"] <= as_of]
    ids = [n["id"] for n in data["nodes"]]
    edges = [
        (ids[source], ids[target], turn)
        for source, target, turn in data["edges"]
        if as_of is None or turn <= as_of
    ]
    return {n["id"]: n for n in shown}, edges
