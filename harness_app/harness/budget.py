"""The budget B: turns and context tokens, and the marker that shows them to the model.

Token counts are an estimate, not a tokenizer: ceil(characters / 4), which is close to
BPE tokenizers on English prose and costs nothing. `tokens_used` accumulates the estimate
of every observation the model receives (reset included) and of every action it emits (tool
name plus JSON arguments), because in a chat transcript both stay in the context. With
`HarnessConfig.wm_in_history=False` (a policy that keeps only the latest WORKINGMEMORY in
its prompt) only the current WM is counted, not every turn's. The system prompt and tool
schemas are the policy's business and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness_app.harness.tools import END_SEARCH

CHARS_PER_TOKEN = 4
WARNING_LEVELS: tuple[float, ...] = (0.60, 0.75, 0.90)


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    turn: int
    max_turns: int
    tokens_used: int
    token_limit: int

    @property
    def turn_fraction(self) -> float:
        return self.turn / self.max_turns if self.max_turns else 1.0

    @property
    def token_fraction(self) -> float:
        return self.tokens_used / self.token_limit if self.token_limit else 1.0

    @property
    def fraction(self) -> float:
        """The tighter of the two budgets: the one that will end the episode first."""
        return max(self.turn_fraction, self.token_fraction)

    def warning_level(self, levels: tuple[float, ...] = WARNING_LEVELS) -> float | None:
        """The highest warning threshold reached, or None below the first."""
        reached = [level for level in levels if self.fraction >= level]
        return max(reached) if reached else None


def render_budget(status: BudgetStatus, levels: tuple[float, ...] = WARNING_LEVELS) -> str:
    """One line, plus a warning line once a threshold is crossed."""
    line = (
        f"BUDGET turn {status.turn}/{status.max_turns} · "
        f"~{_k(status.tokens_used)}/{_k(status.token_limit)} tokens "
        f"({status.token_fraction:.0%})"
    )
    level = status.warning_level(levels)
    if level is None:
        return line
    which = "turns" if status.turn_fraction >= status.token_fraction else "context"
    return f"{line}\n{_warning(level, which, status.fraction)}"


def _warning(level: float, which: str, fraction: float) -> str:
    if level >= 0.90:
        advice = f"finish now: fix the curated set and call {END_SEARCH}"
    elif level >= 0.75:
        advice = "stop exploring; verify and tag what you have"
    else:
        advice = "prefer curating and verifying over new searches"
    return f"WARNING {fraction:.0%} of {which} budget used: {advice}"


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)
