"""The budget B: turns and context tokens, and the markers that show them to the model.

How tokens are counted depends on who owns the context (`HarnessConfig.context_mode`):

- `append` (the conversation only grows): the environment keeps `tokens_used`, the sum of
  every observation the model receives (reset included) and every action it emits (tool
  name plus JSON arguments), because in a chat transcript both stay in the context. With
  `HarnessConfig.wm_in_history=False` (a policy that keeps only the latest WORKINGMEMORY)
  only the current WM is counted. The system prompt and tool schemas are not counted here;
  the chat policy checks its exact prompt length itself before every call. The count uses
  the env's token counter: an LLM rollout hands it the policy model's tokenizer
  (`SearchHarness.set_token_counter`), so it is real tokens. Without one (the no-LLM
  baseline has no tokenizer) it is an *estimate*, ceil(characters / 4), close to BPE
  tokenizers on English prose, and the WORKINGMEMORY marks it with "~".
- `rerender` (Harness-1: every prompt is rebuilt from the state): the policy owns the
  context and counts its exact prompt in real tokens; it shows `context_marker` after each
  search result and truncates or ends the episode itself (llm/context.py). The environment
  then counts nothing, never ends an episode on context, and its BUDGET line shows turns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness_app.harness.tools import END_SEARCH

CHARS_PER_TOKEN = 4
WARNING_LEVELS: tuple[float, ...] = (0.60, 0.75, 0.90)
# Who owns the context: the env's running count (append) or the policy's prompt (rerender).
CONTEXT_MODES: tuple[str, ...] = ("append", "rerender")
# Harness-1's prompt cap in rerender mode (the `[Context: used/30720]` marker).
RERENDER_CONTEXT_LIMIT = 30_720

# str -> number of tokens: the policy model's tokenizer, or `estimate_tokens`.
TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """ceil(characters / 4): the estimate used where no tokenizer is at hand."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    turn: int
    max_turns: int
    tokens_used: int
    token_limit: int
    # False: tokens_used is the chars/4 estimate, shown with "~". None: the policy owns the
    # context (rerender mode) and only turns are shown and warned about.
    exact_tokens: bool | None = False

    @property
    def turn_fraction(self) -> float:
        return self.turn / self.max_turns if self.max_turns else 1.0

    @property
    def token_fraction(self) -> float:
        if self.exact_tokens is None:
            return 0.0
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
    line = f"BUDGET turn {status.turn}/{status.max_turns}"
    if status.exact_tokens is not None:
        approx = "" if status.exact_tokens else "~"
        line += (
            f" · {approx}{_k(status.tokens_used)}/{_k(status.token_limit)} tokens "
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


def context_marker(
    used: int, limit: int = RERENDER_CONTEXT_LIMIT, levels: tuple[float, ...] = WARNING_LEVELS
) -> str:
    """`[Context: used/limit]`, the rerender mode's marker in real tokens, flagged from the
    first warning level on; the 90 % flag tells the model to end the search now."""
    marker = f"[Context: {used}/{limit}]"
    fraction = used / limit if limit else 1.0
    reached = [level for level in levels if fraction >= level]
    if not reached:
        return marker
    level = max(reached)
    if level >= 0.90:
        advice = f"call {END_SEARCH} now"
    elif level >= 0.75:
        advice = "stop exploring; verify and curate what you have"
    else:
        advice = "prefer curating and verifying over new searches"
    return f"{marker} {fraction:.0%} of the context used: {advice}"


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)
