"""A teacher batch's filter rule: which sampled trajectories go to the annotation queue.

The rule is plain data saved with the batch (`RolloutBatch.teacher_rule`), checked once by
`teacher_rule_clean` (a bad clause names its field) and fixed from then on. When an episode
of the batch completes, `teacher_rule_failures` lists the clauses it fails: none, and it
enters the annotation queue; any, and it is kept but left out of the queue
(services/rollouts.py stores the verdict on the episode).

The clause names are the episode list's filter keys (episode_filters.py), so a rule reads
the same as the filter that would show the same episodes; `termination_reasons` is the one
clause the list has no key for (a set of reasons rather than one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trajectories.models import ENDED_REASONS

RECALL_CLAUSES = ("curated_recall_min", "final_answer_recall_min", "trajectory_recall_min")
COUNT_CLAUSES = ("format_errors_max", "turns_max")
RULE_KEYS = (*RECALL_CLAUSES, *COUNT_CLAUSES, "termination_reasons")


class TeacherRuleError(ValueError):
    """A rule that cannot be saved; `field` names the clause and the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"teacher rule {field}: {message}")
        self.field = field
        self.detail = message


def _recall(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise TeacherRuleError(key, f"expected a number between 0 and 1, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TeacherRuleError(key, f"expected a number between 0 and 1, got {value!r}") from None
    if not 0.0 <= number <= 1.0:  # also rejects NaN
        raise TeacherRuleError(key, f"must be between 0 and 1, got {value!r}")
    return number


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TeacherRuleError(key, f"expected a whole number, got {value!r}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise TeacherRuleError(key, f"expected a whole number, got {value!r}") from None
    if isinstance(value, float) and value != number:
        raise TeacherRuleError(key, f"expected a whole number, got {value!r}")
    low = 1 if key == "turns_max" else 0
    if number < low:
        raise TeacherRuleError(key, f"must be at least {low}, got {number}")
    return number


def _reasons(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise TeacherRuleError("termination_reasons", f"expected a list, got {value!r}")
    reasons = sorted({str(item).strip() for item in items if str(item).strip()})
    unknown = [r for r in reasons if r not in ENDED_REASONS]
    if unknown:
        raise TeacherRuleError(
            "termination_reasons",
            f"{', '.join(unknown)} is not a reason a completed episode ends with; "
            f"use {', '.join(ENDED_REASONS)}",
        )
    return reasons


def teacher_rule_clean(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The rule with typed values; empty clauses are dropped (an empty rule passes every
    completed episode), and an unknown key is an error rather than ignored."""
    if not isinstance(raw, Mapping):
        raise TeacherRuleError("rule", f"expected an object of clauses, got {raw!r}")
    rule: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in RULE_KEYS:
            raise TeacherRuleError(key, f"unknown clause; use {', '.join(RULE_KEYS)}")
        if value is None or (isinstance(value, str | list | tuple) and not value):
            continue
        if isinstance(value, str) and not value.strip():
            continue
        if key in RECALL_CLAUSES:
            rule[key] = _recall(key, value)
        elif key in COUNT_CLAUSES:
            rule[key] = _count(key, value)
        else:
            reasons = _reasons(value)
            if reasons:
                rule[key] = reasons
    return rule


def teacher_rule_failures(rule: Mapping[str, Any], episode: Mapping[str, Any]) -> list[str]:
    """The clauses of a cleaned rule that the episode's metric columns fail, in rule order.

    A recall that was never measured (None) fails its clause: nothing shows it is met.
    """
    failed: list[str] = []
    for key in RECALL_CLAUSES:
        if key in rule:
            value = episode.get(key.removesuffix("_min"))
            if value is None or value < rule[key]:
                failed.append(key)
    for key in COUNT_CLAUSES:
        if key in rule and episode.get(key.removesuffix("_max"), 0) > rule[key]:
            failed.append(key)
    if "termination_reasons" in rule and episode.get("termination_reason") not in set(
        rule["termination_reasons"]
    ):
        failed.append("termination_reasons")
    return failed


def clause_label(key: str, rule: Mapping[str, Any]) -> str:
    """A clause as a person reads it: "curated recall ≥ 0.5", "turns ≤ 12"."""
    value = rule.get(key)
    if key in RECALL_CLAUSES:
        return f"{key.removesuffix('_min').replace('_', ' ')} ≥ {value:g}"
    if key in COUNT_CLAUSES:
        return f"{key.removesuffix('_max').replace('_', ' ')} ≤ {value}"
    return f"termination reason in {{{', '.join(value or [])}}}"
