"""The harness's settings.

Apart from the environment, so that the environment, the tool handlers and the working
memory can each import them without importing one another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from harness_app.harness.budget import CONTEXT_MODES, WARNING_LEVELS
from harness_app.harness.tools import ToolLimits
from harness_app.harness.types import JSONObject


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{name}={raw!r} must be a positive number of seconds")
    return value


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """Every number the harness uses; see docs/harness.md for what each one does."""

    max_turns: int = 40
    context_token_limit: int = 32_768
    curated_capacity: int = 30
    search_k: int = 10
    fan_out_k: int = 10  # hits per query in fan_out_search (Harness-1 renders the top 10)
    max_fan_out: int = 5
    max_ids_per_call: int = 5  # review_docs and verify
    max_calls_per_turn: int = 8
    max_format_error_turns: int = 3
    auto_seed_count: int = 8
    compress_sentences: int = 4
    sentence_chars: int = 300  # cap on each compressed sentence
    snippet_chars: int = 2048  # raw text shown when compression is ablated (as Harness-1)
    read_max_chars: int = 4000
    memory_snippet_chars: int = 400  # what document memory D keeps of each view
    dedup_threshold: float = 0.85
    grep_max_hits: int = 5
    # HARNESS_GREP_TIME_LIMIT_S overrides it for a run where results must not depend on
    # the machine's load (the CLI-parity test): a deadline stop can find different hits.
    grep_time_limit_s: float = field(
        default_factory=lambda: _env_float("HARNESS_GREP_TIME_LIMIT_S", 0.25)
    )
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

    # -- Harness-1 protocol switches (issue 17). Each default follows the reference; the
    # other value restores the workbench's earlier behaviour. docs/harness.md has the table.
    # Near-duplicates hidden by dedup stay out of T (trajectory recall) and cannot be
    # curated, verified or reviewed until their text is shown; True counts them as shown.
    hidden_duplicates_count_as_shown: bool = False
    # A turn counts toward max_turns and the turn penalty only if a call other than
    # end_search ran; format-error turns and end_search-only turns do not. True counts
    # every step.
    count_every_step: bool = False
    # review_docs re-reads each document's stored text, up to review_max_chars, under the
    # card's header (tag, where seen, verdicts); False shows the memory card's snippet.
    review_docs_text: bool = True
    review_max_chars: int = 2048
    # A switched-off mechanism's tool stays in the schemas and answers that it is
    # unavailable (not a format error); False removes it, and calling it is an unknown tool.
    keep_ablated_tools: bool = True

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
    def max_steps(self) -> int:
        """The most steps an episode can take: a cap for runners, never reached first.

        Uncounted steps are format-error turns (at most max_format_error_turns - 1 in a row
        before a counted one, else the episode ends) and a final end_search turn.
        """
        if self.count_every_step:
            return self.max_turns
        return (self.max_turns + 1) * max(self.max_format_error_turns, 1)

    @property
    def tool_limits(self) -> ToolLimits:
        return ToolLimits(
            max_queries=self.max_fan_out,
            max_ids=self.max_ids_per_call,
            max_curate_ids=self.curated_capacity,
            max_pattern_chars=self.grep_max_pattern_chars,
        )

    def to_json(self) -> JSONObject:
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
