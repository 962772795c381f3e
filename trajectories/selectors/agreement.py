"""Agreement between annotators: Cohen's kappa per pair and Fleiss' kappa over the
episodes that the same number of annotators labelled; the pure functions and the read over
the stored labels. Researchers read them on the agreement page and through the API.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from trajectories.episode_filters import episode_filters_clean, episodes_matching
from trajectories.models import Annotation, AnnotationLabel


def cohens_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters over the same items, in the same order.

    None when chance agreement is total (both raters used one and the same category for
    every item): kappa is 0/0 there.
    """
    if len(first) != len(second):
        raise ValueError(f"the raters labelled {len(first)} and {len(second)} items")
    if not first:
        return None
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    counts_a, counts_b = Counter(first), Counter(second)
    expected = sum(counts_a[c] * counts_b[c] for c in counts_a) / (n * n)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1 - expected)


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from an items × categories table of how many raters chose each.

    Every item must have the same number of raters (at least two). None when chance
    agreement is total (every rating fell in one category).
    """
    if not table:
        return None
    raters = sum(table[0])
    if raters < 2 or any(sum(row) != raters for row in table):
        raise ValueError("every item needs the same number of raters, at least two")
    items, total = len(table), len(table) * raters
    shares = [sum(row[j] for row in table) / total for j in range(len(table[0]))]
    per_item = [(sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in table]
    observed = sum(per_item) / items
    expected = sum(p * p for p in shares)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1 - expected)


# --- over the stored labels -------------------------------------------------------------------


def annotation_agreement(*, filters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Cohen's kappa per pair of annotators and Fleiss' kappa over fully-overlapped items.

    Fleiss needs a constant number of raters, so it uses the episodes labelled by the most
    common number (≥ 2) of annotators. One query.
    """
    episodes = episodes_matching(filters=episode_filters_clean(filters or {}))
    rows = Annotation.objects.filter(
        episode_id__in=episodes.filter(annotation_count__gte=2).values("pk")
    ).values_list("episode_id", "annotator_id", "label")
    by_episode: dict[int, dict[int, str]] = defaultdict(dict)
    for episode_id, annotator_id, label in rows:
        by_episode[episode_id][annotator_id] = label
    return {"cohen": _pairwise(by_episode), "fleiss": _fleiss(by_episode)}


def _pairwise(by_episode: dict[int, dict[int, str]]) -> list[dict[str, Any]]:
    annotators = sorted({a for labels in by_episode.values() for a in labels})
    out = []
    for a, b in itertools.combinations(annotators, 2):
        shared = [labels for labels in by_episode.values() if a in labels and b in labels]
        if shared:
            kappa = cohens_kappa([s[a] for s in shared], [s[b] for s in shared])
            out.append({"annotators": [a, b], "episodes": len(shared), "kappa": kappa})
    return out


def _fleiss(by_episode: dict[int, dict[int, str]]) -> dict[str, Any]:
    sizes = Counter(len(labels) for labels in by_episode.values())
    if not sizes:
        return {"raters": 0, "episodes": 0, "kappa": None}
    raters = max(sizes, key=lambda size: (sizes[size], size))
    categories = list(AnnotationLabel.values)
    table = [
        [list(labels.values()).count(c) for c in categories]
        for labels in by_episode.values()
        if len(labels) == raters
    ]
    return {"raters": raters, "episodes": len(table), "kappa": fleiss_kappa(table)}
