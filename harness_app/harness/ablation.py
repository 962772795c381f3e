"""Which harness mechanisms are switched on for one episode.

An `Ablation` is a plain frozen value handed to each `SearchHarness`, never a process-wide
flag, so one worker process can run every ablation interleaved without them leaking into
each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any

MECHANISMS: tuple[str, ...] = (
    "auto_seed",
    "importance_tags",
    "compression",
    "dedup",
    "evidence_graph",
    "verification",
    "review_docs",
    "budget_marker",
)


@dataclass(frozen=True, slots=True)
class Ablation:
    """One bool per mechanism; everything on by default (the full harness)."""

    auto_seed: bool = True
    importance_tags: bool = True
    compression: bool = True
    dedup: bool = True
    evidence_graph: bool = True
    verification: bool = True
    review_docs: bool = True
    budget_marker: bool = True

    def without(self, *names: str) -> Ablation:
        """A copy with the named mechanisms switched off."""
        _check_names(names)
        return replace(self, **dict.fromkeys(names, False))

    @property
    def disabled(self) -> tuple[str, ...]:
        """The switched-off mechanisms, in MECHANISMS order."""
        return tuple(name for name in MECHANISMS if not getattr(self, name))

    @property
    def label(self) -> str:
        """ "full", or the disabled mechanisms as "-compression-dedup" (MECHANISMS order).

        The order is canonical so that equal ablations always share a label, which the
        dashboards group by.
        """
        off = self.disabled
        return "full" if not off else "".join(f"-{name}" for name in off)

    @classmethod
    def from_label(cls, label: str) -> Ablation:
        """Parse a label produced by `label` (any order of the "-name" parts)."""
        label = label.strip()
        if label in ("", "full"):
            return cls()
        if not label.startswith("-"):
            raise ValueError(f"ablation label must be 'full' or start with '-', got {label!r}")
        return cls().without(*label[1:].split("-"))

    def to_json(self) -> dict[str, bool]:
        return {f.name: bool(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ablation:
        """Missing mechanisms default to on; unknown names or non-bool values are errors."""
        _check_names(tuple(data))
        for name, value in data.items():
            if not isinstance(value, bool):
                raise ValueError(f"ablation field {name!r} must be a bool, got {value!r}")
        return cls(**data)


def _check_names(names: tuple[str, ...]) -> None:
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        raise ValueError(
            f"unknown mechanism(s) {', '.join(map(repr, unknown))}; known: {', '.join(MECHANISMS)}"
        )


# Harness-1's ablation conditions (inference/queue_browsecomp_ablation.py in the public
# reference), in its order. Each single-mechanism condition is `minus_<mechanism>`, so a
# mechanism has one name everywhere: a batch that runs it is labelled `-<mechanism>` and the
# launch forms list it by that name. The reference's minus_importance_tags also switches off
# its "subtractive curation" flag (tag-ranked eviction); here a tagless full set already
# refuses adds, so importance_tags covers both. all_harness_mechanisms_disabled sets every
# V8D_* mechanism flag to 0, V8D_TOKEN_BUDGET_MARKER included, and makes review_docs
# unavailable, so budget_marker belongs to it and every one of MECHANISMS is off. The budget
# itself is still enforced there, as in the reference; only the marker line goes.
REFERENCE_CONDITIONS: Mapping[str, Ablation] = MappingProxyType(
    {
        "full": Ablation(),
        **{
            f"minus_{mechanism}": Ablation().without(mechanism)
            for mechanism in (
                "auto_seed",
                "importance_tags",
                "evidence_graph",
                "verification",
                "compression",
                "dedup",
                "review_docs",
            )
        },
        "all_harness_mechanisms_disabled": Ablation().without(*MECHANISMS),
    }
)
# The reference's own names for three of them, which this project used until its pages,
# exports and API settled on one name per mechanism. Still accepted wherever a condition is
# given (forms, the API, the CLI), so no stored request or script breaks; never shown.
CONDITION_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "minus_verify": "minus_verification",
        "minus_sentence_compress": "minus_compression",
        "minus_content_dedup": "minus_dedup",
    }
)


def condition_name(name: str) -> str:
    """A condition's one name: a reference alias becomes ours, anything else is unchanged
    (an unknown name is refused where the conditions are checked)."""
    return CONDITION_ALIASES.get(name, name)


def reference_conditions(names: Sequence[str]) -> list[tuple[str, Ablation]]:
    """The named reference conditions (aliases accepted, answered by their one name), in the
    order given, each once; an unknown name is a ValueError."""
    names = list(dict.fromkeys(condition_name(name) for name in names))
    unknown = [n for n in names if n not in REFERENCE_CONDITIONS]
    if unknown:
        raise ValueError(
            f"unknown condition(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(REFERENCE_CONDITIONS)}"
        )
    return [(name, REFERENCE_CONDITIONS[name]) for name in names]
