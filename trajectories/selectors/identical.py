"""Identical samples: episodes of one group that did exactly the same thing.

A deterministic policy sampled N times gives N copies of one episode. The group page folds
samples with the same outcome figures and final curated set into one card
(batches.SAMPLE_OUTCOME); the annotation queue folds them into one item, and one label then
stands for all of them, so it asks for more: the same format errors and the same tool calls,
turn by turn (names and arguments; call ids are the policy's own numbering). Two samples
that reached the same curated set by different searches are judged apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from trajectories.models import CuratedItem, Episode, Turn
from trajectories.selectors.batches import SAMPLE_OUTCOME

IDENTICAL_OUTCOME = (*SAMPLE_OUTCOME, "format_errors")


def identical_samples(*, episode: Episode, among: QuerySet[Episode]) -> list[int]:
    """Ids of the episodes in `among`, `episode` left out, that are identical samples of it,
    in id order. At most three queries: one when no other sample has the same outcome."""
    if episode.group_id is None:
        return []
    outcome = {name: getattr(episode, name) for name in IDENTICAL_OUTCOME}
    same = among.filter(group_id=episode.group_id, **outcome).exclude(pk=episode.pk)
    candidates = list(same.order_by("pk").values_list("pk", flat=True))
    if not candidates:
        return []
    ids = [episode.pk, *candidates]
    curated = _curated_sets(ids)
    actions = _actions(ids)
    mine = (curated.get(episode.pk, []), actions.get(episode.pk, []))
    return [pk for pk in candidates if (curated.get(pk, []), actions.get(pk, [])) == mine]


def _curated_sets(ids: list[int]) -> dict[int, list[tuple[int, str]]]:
    rows = (
        CuratedItem.objects.filter(episode_id__in=ids)
        .order_by("episode_id", "added_turn", "pk")
        .values_list("episode_id", "document_id", "tag")
    )
    out: dict[int, list[tuple[int, str]]] = {}
    for episode_id, document_id, tag in rows:
        out.setdefault(episode_id, []).append((document_id, tag))
    return out


def _actions(ids: list[int]) -> dict[int, list[list[tuple[str, Any]]]]:
    rows = (
        Turn.objects.filter(episode_id__in=ids)
        .order_by("episode_id", "index")
        .values_list("episode_id", "tool_calls")
    )
    out: dict[int, list[list[tuple[str, Any]]]] = {}
    for episode_id, calls in rows:
        out.setdefault(episode_id, []).append(_calls(calls or []))
    return out


def _calls(calls: Iterable[Any]) -> list[tuple[str, Any]]:
    return [(str(c.get("name", "")), c.get("arguments")) for c in calls if isinstance(c, dict)]
