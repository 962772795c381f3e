"""Policies that drive the search harness without a model: the deterministic baseline and
its sampled variant (LLM policies are built by their callers, with a client)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from harness_app.harness.policies.base import Policy, PolicyError
from harness_app.harness.policies.baseline import BaselinePolicy
from harness_app.harness.policies.sampled import SampledBaselinePolicy

# A factory takes the names of the tools the episode offers (None: all of them) and the
# episode's seed, which only a policy that samples uses.
PolicyFactory = Callable[[Collection[str] | None, int], Policy]


def _baseline(tools: Collection[str] | None, seed: int) -> Policy:
    return BaselinePolicy(tools=tools)


def _baseline_sampled(tools: Collection[str] | None, seed: int) -> Policy:
    return SampledBaselinePolicy(tools=tools, seed=seed)


# Names the CLI and the ablation matrices accept; model-backed policies need a client and
# are built by their callers.
POLICY_FACTORIES: dict[str, PolicyFactory] = {
    "baseline": _baseline,
    "baseline_sampled": _baseline_sampled,
}


def make_policy(name: str, *, tools: Collection[str] | None = None, seed: int = 0) -> Policy:
    """A new policy by registered name, for the episode `seed` picks (a sample or run
    index); PolicyError lists the known names otherwise."""
    try:
        factory = POLICY_FACTORIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICY_FACTORIES))
        raise PolicyError(f"unknown policy {name!r} (known: {known})") from None
    return factory(tools, seed)


def rule_policy(
    *, tools: Collection[str] | None = None, temperature: float = 0.0, seed: int = 0
) -> Policy:
    """The baseline a policy config of kind `baseline` plays: deterministic at temperature
    0, sampled above it."""
    if temperature > 0:
        return SampledBaselinePolicy(tools=tools, seed=seed, temperature=temperature)
    return BaselinePolicy(tools=tools)


__all__ = [
    "POLICY_FACTORIES",
    "BaselinePolicy",
    "Policy",
    "PolicyError",
    "SampledBaselinePolicy",
    "make_policy",
    "rule_policy",
]
