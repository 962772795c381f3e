"""Statistics of evaluation runs: spread over runs and paired comparisons with a bootstrap CI.

Pure Python, so the web app's evaluation runs (trajectories/selectors/evaluations.py) and any
script compute them alike. The spread is the one `ablate` reports (the mean over runs and the
population std across runs, `ablation_matrix.across_runs`); the paired comparison resamples queries,
the unit that is shared by both configurations, with replacement.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Spread:
    """A metric over runs: the mean of the per-run means and their population std."""

    mean: float
    std: float
    runs: int


def spread(per_run: Sequence[float]) -> Spread | None:
    """Mean and population std of per-run values; None when no run has a value."""
    if not per_run:
        return None
    return Spread(statistics.fmean(per_run), statistics.pstdev(per_run), len(per_run))


@dataclass(frozen=True)
class PairedComparison:
    """B minus A over the queries both configurations ran: the mean difference, the
    percentile bootstrap CI of that mean, and how often B beat, tied or lost to A."""

    n: int
    mean_a: float
    mean_b: float
    mean_difference: float
    ci_low: float
    ci_high: float
    confidence: float
    resamples: int
    seed: int
    wins: int
    ties: int
    losses: int


def paired_bootstrap(
    a: Mapping[Key, float],
    b: Mapping[Key, float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> PairedComparison | None:
    """Compare two configurations on the keys (queries) both have; None when they share none.

    Each resample draws as many differences as there are shared queries, with replacement,
    and takes their mean; the CI is the (1 - confidence) / 2 and (1 + confidence) / 2
    percentiles of those means. A fixed seed makes the interval reproducible.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    shared = sorted((k for k in a if k in b), key=repr)
    if not shared:
        return None
    diffs = [b[k] - a[k] for k in shared]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    return PairedComparison(
        n=n,
        mean_a=statistics.fmean(a[k] for k in shared),
        mean_b=statistics.fmean(b[k] for k in shared),
        mean_difference=statistics.fmean(diffs),
        ci_low=_percentile(means, tail),
        ci_high=_percentile(means, 1 - tail),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        wins=sum(d > 0 for d in diffs),
        ties=sum(d == 0 for d in diffs),
        losses=sum(d < 0 for d in diffs),
    )


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default method)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
