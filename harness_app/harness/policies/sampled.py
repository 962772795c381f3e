"""The sampled baseline: the deterministic baseline with some of its choices drawn at random,
seeded per episode, so that samples of one query differ and the mechanisms show.

The deterministic baseline gives one episode per question whatever is switched off, so on
a small benchmark every ablation condition, evaluation run and sample of it has the same
numbers. This variant stands in for a model sampled at a temperature (what the demo runs):

- Bridge entities to look up are taken in an order drawn by their scores (Gumbel-top-k at
  `temperature` over score / best score), not always best first, so a round may follow a
  weaker lead and miss, or find, a hop.
- The curated set is drawn the same way from the ranked documents, and its size is one
  of `curate_size` - 1, `curate_size`, `curate_size` + 1.
- It takes the verifier's word: a curated document the verifier found unsupported is
  removed with probability `drop_unsupported` (the baseline only tags it low, and not at
  all when a bridge entity vouches for it). Switching verification off therefore changes
  its curated sets; on the demo benchmark it raises their recall, as the lexical verifier
  checks a two-hop claim against one document at a time.

What it draws depends on what the harness showed it (how many candidates, which
verdicts), so the mechanisms change its episodes, as they would a model's. Everything
comes from one `random.Random` seeded at `reset` by (`seed`, question): the same seed and
question give the same episode in any process; samples and runs pass different seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

from harness_app.harness.policies.baseline import BaselineConfig, BaselinePolicy
from harness_app.harness.policies.evidence import Candidate
from harness_app.harness.state import HarnessState
from harness_app.harness.tools import CURATE
from harness_app.harness.types import ToolCall

DEFAULT_TEMPERATURE = 0.2  # on score / best score: mild; 1 is close to uniform
DROP_UNSUPPORTED = 0.5

T = TypeVar("T")


def gumbel_order(
    items: Sequence[T], scores: Sequence[float], *, temperature: float, rng: random.Random
) -> list[T]:
    """`items` in an order drawn without replacement with probability proportional to
    exp(score / best / temperature) (Gumbel-top-k): the best first most often."""
    best = max((s for s in scores if s > 0), default=1.0)

    def key(index: int) -> float:
        gumbel = -math.log(-math.log(rng.random() or 1e-12))
        return scores[index] / best / temperature + gumbel

    keys = [key(i) for i in range(len(items))]
    return [items[i] for i in sorted(range(len(items)), key=lambda i: -keys[i])]


class SampledBaselinePolicy(BaselinePolicy):
    """See the module docstring. `seed` picks the episode; one instance plays one at a time."""

    name = "baseline_sampled"

    def __init__(
        self,
        config: BaselineConfig | None = None,
        tools: Collection[str] | None = None,
        *,
        seed: int = 0,
        temperature: float = DEFAULT_TEMPERATURE,
        drop_unsupported: float = DROP_UNSUPPORTED,
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be above 0, got {temperature}")
        self.seed = seed
        self.temperature = temperature
        self.drop_unsupported = drop_unsupported
        self._rng = random.Random()
        self._dropped: list[str] = []
        super().__init__(config, tools)

    def reset(self, query_text: str) -> None:
        super().reset(query_text)
        # A string seed is hashed with SHA-512: the same in every process.
        self._rng = random.Random(f"{self.seed}:{query_text}")
        self._dropped = []

    def _order_candidates(self, candidates: list[Candidate]) -> list[Candidate]:
        scores = [c.score for c in candidates]
        return gumbel_order(candidates, scores, temperature=self.temperature, rng=self._rng)

    def _best(self, state: HarnessState) -> list[tuple[str, float]]:
        ranked = self._best_scores(state)
        size = self.config.curate_size + self._rng.choice((-1, 0, 1))
        drawn = gumbel_order(
            ranked, [s for _, s in ranked], temperature=self.temperature, rng=self._rng
        )
        chosen = drawn[: max(size, 1)]
        # Best first, as the baseline hands them over: the top one sets the tags' scale.
        return sorted(chosen, key=lambda pair: -pair[1])

    def _finish(self, state: HarnessState) -> list[ToolCall]:
        self._dropped = self._unsupported_to_drop(state)
        calls = super()._finish(state)
        if self._dropped:
            calls.insert(0, ToolCall(CURATE, {"remove_ids": list(self._dropped)}))
        return calls

    def _retag_by_verdict(self, state: HarnessState) -> dict[str, str]:
        tags = super()._retag_by_verdict(state)
        return {doc: tag for doc, tag in tags.items() if doc not in self._dropped}

    def _unsupported_to_drop(self, state: HarnessState) -> list[str]:
        latest: dict[str, Any] = {v.doc_id: v.verdict for v in state.verifications}
        unsupported = [doc for doc in state.curated if latest.get(doc) == "unsupported"]
        dropped = [doc for doc in unsupported if self._rng.random() < self.drop_unsupported]
        # Never the whole set: an empty hand-back would score nothing at all.
        return dropped if len(dropped) < len(state.curated) else dropped[:-1]
