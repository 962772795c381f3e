"""Policies that drive the search harness: a deterministic baseline and, later, LLM policies."""

from __future__ import annotations

from collections.abc import Callable, Collection

from harness_app.harness.policies.base import Policy, PolicyError
from harness_app.harness.policies.baseline import BaselinePolicy

# A factory takes the names of the tools the episode offers (None: all of them).
PolicyFactory = Callable[[Collection[str] | None], Policy]


def _baseline(tools: Collection[str] | None) -> Policy:
    return BaselinePolicy(tools=tools)


# Names the CLI accepts; model-backed policies need a client and are built by their callers.
POLICY_FACTORIES: dict[str, PolicyFactory] = {"baseline": _baseline}


def make_policy(name: str, *, tools: Collection[str] | None = None) -> Policy:
    """A new policy by registered name; PolicyError lists the known names otherwise."""
    try:
        factory = POLICY_FACTORIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICY_FACTORIES))
        raise PolicyError(f"unknown policy {name!r} (known: {known})") from None
    return factory(tools)


__all__ = ["POLICY_FACTORIES", "BaselinePolicy", "Policy", "PolicyError", "make_policy"]
