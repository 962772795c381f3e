"""The harness's settings.

Apart from the environment, so that the environment, the tool handlers and the working
memory can each import them without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from harness_app.harness.budget import CONTEXT_MODES, WARNING_LEVELS
from harness_app.harness.tools import ToolLimits


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """Every number the harness uses; see docs/harness.md for what each one does."""

    max_turns: int = 40
    context_token_limit: int = 32_768
    curated_capacity: int = 30
    search_k: int = 10
    fan_out_k: int = 5  # hits per query in fan_out_search
    max_fan_out: int = 5
    max_ids_per_call: int = 5  # review_docs and verify
    max_calls_per_turn: int = 8
    max_format_error_turns: int = 3
    auto_seed_count: int = 8
    compress_sentences: int = 4
    sentence_chars: int = 300  # cap on each compressed sentence
    snippet_chars: int = 300  # leading snippet when compression is ablated
    read_max_chars: int = 4000
    memory_snippet_chars: int = 400  # what document memory D keeps of each view
    dedup_threshold: float = 0.85
    grep_max_hits: int = 5
    grep_time_limit_s: float = 0.25
    grep_max_scan_chars: int = 20_000_000
    grep_doc_chars: int = 20_000
    grep_max_pattern_chars: int = 200
    wm_snippet_chars: int = 48
    wm_top_candidates: int = 5
    wm_recent_searches: int = 4
    wm_bridges: int = 5
    wm_verifications: int = 6
    budget_warnings: tuple[float, ...] = WARNING_LEVELS
    # False when the policy keeps only the latest WORKINGMEMORY in its prompt (dropping the
    # earlier ones), so the context estimate counts one WM instead of every turn's.
    wm_in_history: bool = True
    # "append": the env counts the growing context and ends the episode at
    # context_token_limit. "rerender": the policy rebuilds every prompt and owns its budget;
    # the env counts nothing and never ends on context (budget.py).
    context_mode: str = "append"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"HarnessConfig.{f.name} must be >= 0, got {value!r}")
        if self.context_mode not in CONTEXT_MODES:
            raise ValueError(
                f"HarnessConfig.context_mode must be one of {', '.join(CONTEXT_MODES)}, "
                f"got {self.context_mode!r}"
            )
        for name in ("max_turns", "context_token_limit", "search_k", "max_calls_per_turn"):
            if getattr(self, name) < 1:
                raise ValueError(f"HarnessConfig.{name} must be >= 1")

    @property
    def tool_limits(self) -> ToolLimits:
        return ToolLimits(
            max_queries=self.max_fan_out,
            max_ids=self.max_ids_per_call,
            max_curate_ids=self.curated_capacity,
            max_pattern_chars=self.grep_max_pattern_chars,
        )

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["budget_warnings"] = list(self.budget_warnings)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HarnessConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown HarnessConfig field(s): {', '.join(unknown)}")
        values = dict(data)
        if "budget_warnings" in values:
            values["budget_warnings"] = tuple(values["budget_warnings"])
        return cls(**values)
