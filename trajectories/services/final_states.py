"""An episode's final state as rows: its curated items, verifications and evidence graph
(documents and bridge entities), written once when the episode finishes
(`rollouts.episode_finish`), for the pages and the API to query."""

from __future__ import annotations

from harness_app.harness.graph import EvidenceGraph
from harness_app.harness.state import HarnessState
from harness_app.models import Document
from trajectories.models import CuratedItem, Episode, EvidenceEdge, EvidenceNode, Verification


def final_state_record(*, episode: Episode, state: HarnessState) -> None:
    """Curated items, the evidence graph (documents and bridge entities) and verifications."""
    batch = episode.batch
    assert batch is not None  # final states are the harness's: rollouts only
    corpus_id = batch.benchmark.corpus_id
    wanted = set(state.curated) | set(state.graph.docs) | {v.doc_id for v in state.verifications}
    docs = dict(
        Document.objects.filter(corpus_id=corpus_id, external_id__in=wanted).values_list(
            "external_id", "pk"
        )
    )
    CuratedItem.objects.bulk_create(
        CuratedItem(
            episode=episode, document_id=docs[i], tag=item.importance, added_turn=item.added_turn
        )
        for i, item in state.curated.items()
        if i in docs
    )
    Verification.objects.bulk_create(
        Verification(
            episode=episode,
            document_id=docs[v.doc_id],
            claim=v.claim,
            verdict=v.verdict,
            score=v.score,
            evidence=list(v.evidence),
            turn_index=v.turn,
        )
        for v in state.verifications
        if v.doc_id in docs
    )
    _graph_record(episode=episode, graph=state.graph)


def _graph_record(*, episode: Episode, graph: EvidenceGraph) -> None:
    # Only bridge entities are stored as rows: they are what connects documents, and
    # non-bridge entities stay in each turn's state snapshot.
    bridges = [graph.entities[k] for k in graph.bridges]
    nodes = EvidenceNode.objects.bulk_create(
        [
            EvidenceNode(
                episode=episode,
                kind=EvidenceNode.Kind.DOCUMENT,
                key=d.doc_id[:300],
                label=d.title[:300],
            )
            for d in graph.docs.values()
        ]
        + [
            EvidenceNode(
                episode=episode,
                kind=EvidenceNode.Kind.ENTITY,
                key=e.key[:300],
                label=e.label[:300],
                is_bridge=True,
            )
            for e in bridges
        ]
    )
    by_key = {(n.kind, n.key): n for n in nodes}
    EvidenceEdge.objects.bulk_create(
        EvidenceEdge(
            episode=episode,
            source=by_key[(EvidenceNode.Kind.DOCUMENT, doc_id[:300])],
            target=by_key[(EvidenceNode.Kind.ENTITY, e.key[:300])],
        )
        for e in bridges
        for doc_id in e.doc_ids
        if (EvidenceNode.Kind.DOCUMENT, doc_id[:300]) in by_key
    )
