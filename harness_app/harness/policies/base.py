"""The contract every policy meets, whether a rule-based baseline or an LLM behind vLLM."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from harness_app.harness.types import Observation, ToolCall


class PolicyError(RuntimeError):
    """The policy could not produce an action (model server down, budget spent, bad config).

    The runner ends the episode on it and records the message; it is not a format error,
    which is the environment's business and costs the policy a turn instead.
    `reason` becomes the episode's termination reason; subclasses set a more specific one.
    """

    reason: str = "policy_error"


@runtime_checkable
class Policy(Protocol):
    """Chooses the tool calls for each turn of one episode at a time."""

    name: str

    def reset(self, query_text: str) -> None:
        """Forget the previous episode and start working on `query_text`."""
        ...

    def act(self, observation: Observation, state: Any) -> list[ToolCall]:
        """The tool calls for the next turn.

        `state` is the environment's HarnessState, to be read and never mutated. An LLM
        policy ignores it and sees only `observation.text`, as the model would; the rule-based
        baseline reads it so that it needs no text parsing.
        """
        ...
