"""The curated set C and its importance tags: adds, removals, retags, capacity, eviction.

Rules (capacity 30 by default):

- Removals run first, then adds/retags in the order given.
- Adding a doc that is already curated only changes its tag when a different one is
  given (a "retagged" event); retagging never needs room.
- Adding to a full set evicts one doc of the *lowest* tag present, but only when that tag
  ranks strictly below the incoming doc's tag (very_high > high > fair > low). Among docs
  of that tag the earliest added goes first, so the outcome is predictable for the model.
  Otherwise the add is refused with a capacity message and a "refused" event.
- With importance tags ablated every doc is `fair`, so nothing ranks below anything and a
  full set refuses every add.

Every change is appended to `state.curation_log` as a typed event; the UI renders a turn's
events as the curated-set diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness_app.harness.state import (
    IMPORTANCE_RANK,
    CuratedItem,
    CurationEvent,
    HarnessState,
)

DEFAULT_TAG = "fair"


@dataclass(slots=True)
class CurationOutcome:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    retagged: list[str] = field(default_factory=list)
    evicted: list[tuple[str, str]] = field(default_factory=list)  # (evicted, for incoming)
    refused: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def summary(self, state: HarnessState, capacity: int) -> str:
        parts = [f"curated {len(state.curated)}/{capacity}"]
        if self.added:
            parts.append("added " + ", ".join(_tagged(state, d) for d in self.added))
        if self.retagged:
            parts.append("retagged " + ", ".join(_tagged(state, d) for d in self.retagged))
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        if self.evicted:
            parts.append("evicted " + ", ".join(f"{old} (for {new})" for old, new in self.evicted))
        if self.unchanged:
            parts.append("already curated " + ", ".join(self.unchanged))
        if self.refused:
            parts.append(
                f"REFUSED (set full, nothing ranks below the incoming tag; remove a doc or "
                f"lower a tag first): {', '.join(self.refused)}"
            )
        return "; ".join(parts)


def _tagged(state: HarnessState, doc_id: str) -> str:
    item = state.curated.get(doc_id)
    return doc_id if item is None else f"{doc_id}={item.importance}"


def apply_curation(
    state: HarnessState,
    *,
    add: list[tuple[str, str | None]],
    remove: list[str],
    capacity: int,
    tags_enabled: bool,
    detail: str = "",
) -> CurationOutcome:
    """Apply one validated curate call. `add` pairs a doc id with its tag (None = default)."""
    outcome = CurationOutcome()
    for doc_id in remove:
        item = state.curated.pop(doc_id, None)
        if item is not None:
            outcome.removed.append(doc_id)
            _log(state, "removed", doc_id, item.importance)
    for doc_id, tag in add:
        _add_one(state, outcome, doc_id, tag if tags_enabled else DEFAULT_TAG, capacity, detail)
    return outcome


def _add_one(
    state: HarnessState,
    outcome: CurationOutcome,
    doc_id: str,
    tag: str | None,
    capacity: int,
    detail: str,
) -> None:
    existing = state.curated.get(doc_id)
    if existing is not None:
        if tag is None or tag == existing.importance:
            outcome.unchanged.append(doc_id)
            return
        _log(state, "retagged", doc_id, tag, existing.importance)
        existing.importance = tag
        outcome.retagged.append(doc_id)
        return
    tag = tag or DEFAULT_TAG
    if len(state.curated) >= capacity:
        victim = eviction_candidate(state, tag)
        if victim is None:
            outcome.refused.append(doc_id)
            _log(state, "refused", doc_id, tag, "capacity")
            return
        evicted = state.curated.pop(victim)
        outcome.evicted.append((victim, doc_id))
        _log(state, "evicted", victim, evicted.importance, doc_id)
    state.curated[doc_id] = CuratedItem(doc_id, tag, state.turn)
    outcome.added.append(doc_id)
    _log(state, "added", doc_id, tag, detail)


def eviction_candidate(state: HarnessState, incoming_tag: str) -> str | None:
    """The earliest-added doc of the lowest tag, if that tag ranks strictly below."""
    if not state.curated:
        return None
    # Insertion order is add order (retags update in place), so min() keeps the earliest.
    victim = min(state.curated.values(), key=lambda item: IMPORTANCE_RANK[item.importance])
    if IMPORTANCE_RANK[victim.importance] < IMPORTANCE_RANK[incoming_tag]:
        return victim.doc_id
    return None


def _log(state: HarnessState, kind: str, doc_id: str, tag: str, detail: str = "") -> None:
    state.curation_log.append(CurationEvent(state.turn, kind, doc_id, tag, detail))
