"""SearchHarness: the gym-like environment a policy acts on.

`reset(query)` starts an episode and returns the turn-0 observation (the question inside the
WORKINGMEMORY); `step(tool_calls)` runs one turn of tool calls and returns what the model
sees next. `step` never raises on bad model output: unknown tools, arguments that are not
JSON or do not fit the schema, unknown document ids and rejected regexes all come back as a
`ToolResult` with ok=False and a message saying exactly what was wrong, and count as format
errors. After `max_format_error_turns` consecutive turns in which every call failed, the
episode ends with termination_reason "format_errors".

Episodes end on end_search ("end_search"), after `max_turns` counted turns ("max_turns"),
or, in the `append` context mode, when the accumulated context tokens pass
`context_token_limit` ("context_budget"). Tokens are counted by the env's token counter:
the policy model's tokenizer when an LLM rollout sets one (`set_token_counter`), else the
chars/4 estimate (budget.py). In the `rerender` mode the policy owns its context and the
env counts nothing.

What counts as a turn (`state.turns_used`, which drives `max_turns`, the budget marker and
the reward's turn penalty): a step in which at least one call other than end_search ran,
as Harness-1 counts them. A step in which every call failed (a format-error turn) and a
step whose only successful call was end_search are not counted. A call to a tool whose
mechanism is switched off runs (it answers that the tool is unavailable), so it counts.
`HarnessConfig.count_every_step` counts every step instead. `state.turn` is the step
index either way; records and first-seen turns are numbered by it.

The tool handlers live in handlers.py and the schemas in tools.py; this module owns the
episode loop, termination and observation assembly.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from harness_app.harness.ablation import Ablation
from harness_app.harness.budget import TokenCounter, estimate_tokens
from harness_app.harness.config import HarnessConfig
from harness_app.harness.dedup import DedupIndex
from harness_app.harness.grep import PatternError
from harness_app.harness.handlers import ToolFailure, ToolRunner
from harness_app.harness.state import CurationEvent, HarnessState
from harness_app.harness.tools import (
    END_SEARCH,
    ArgumentError,
    ToolSpec,
    parse_arguments,
    tool_specs,
)
from harness_app.harness.types import (
    CallRecorder,
    Closeable,
    JSONObject,
    Observation,
    QuerySpec,
    Retriever,
    ToolCall,
    ToolResult,
    ending,
)
from harness_app.harness.verify import LexicalVerifier, Verifier
from harness_app.harness.working_memory import render_working_memory

if TYPE_CHECKING:
    from harness_app.harness.llm.verifier import VerifierCallRecord

__all__ = ["SearchHarness"]


class SearchHarness:
    """One environment instance; reusable for many episodes, one at a time.

    It owns the retriever and verifier it is given: `close()` (or leaving a `with` block)
    closes each that holds connections (an LLM verifier, a reranker over the index), and
    `take_verifier_calls()` hands over the calls a recording verifier made.
    """

    def __init__(
        self,
        retriever: Retriever,
        config: HarnessConfig | None = None,
        ablation: Ablation | None = None,
        verifier: Verifier | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.retriever = retriever
        self.config = config or HarnessConfig()
        self.ablation = ablation or Ablation()
        self.verifier: Verifier = verifier or LexicalVerifier()
        self._specs: dict[str, ToolSpec] = {
            spec.name: spec
            for spec in tool_specs(
                self.config.tool_limits,
                self.ablation,
                keep_ablated=self.config.keep_ablated_tools,
            )
        }
        self._state: HarnessState | None = None
        self._runner: ToolRunner | None = None
        self._acted = False  # a call other than end_search ran in this step
        self._count: TokenCounter = estimate_tokens
        self._exact: bool | None = None if self.config.context_mode == "rerender" else False
        self.set_token_counter(token_counter)

    def set_token_counter(self, counter: TokenCounter | None) -> None:
        """Count context tokens with `counter` (the policy model's tokenizer), or with the
        chars/4 estimate when None. Ignored in rerender mode, where nothing is counted."""
        if self._exact is None:
            return
        self._count = counter or estimate_tokens
        self._exact = counter is not None

    def close(self) -> None:
        """Release the services this harness was given; the index stays open."""
        for service in (self.verifier, self.retriever):
            if isinstance(service, Closeable):
                service.close()

    def __enter__(self) -> SearchHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def take_verifier_calls(self) -> list[VerifierCallRecord]:
        """The verifier's calls to its model since the last take; [] for one that makes none."""
        verifier = self.verifier
        return verifier.take_calls() if isinstance(verifier, CallRecorder) else []

    @property
    def state(self) -> HarnessState:
        if self._state is None:
            raise RuntimeError("SearchHarness.reset() has not been called")
        return self._state

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [spec.schema() for spec in self._specs.values()]

    def reset(self, query: QuerySpec) -> Observation:
        self._start(HarnessState(query_id=query.query_id, question=query.text))
        working_memory = self._render()
        if self._exact is not None:
            self.state.tokens_used = self.state.wm_tokens = self._count(working_memory)
        return Observation(
            turn=0, text=working_memory, tool_results=[], working_memory=working_memory
        )

    @classmethod
    def restore(
        cls,
        retriever: Retriever,
        state: HarnessState,
        config: HarnessConfig | None = None,
        ablation: Ablation | None = None,
        verifier: Verifier | None = None,
    ) -> SearchHarness:
        """Resume an episode from a snapshot (e.g. `HarnessState.from_json`)."""
        env = cls(retriever, config=config, ablation=ablation, verifier=verifier)
        env._start(state)
        assert env._runner is not None
        env._runner.rebuild_indexes()
        return env

    def _start(self, state: HarnessState) -> None:
        self._state = state
        self._runner = ToolRunner(
            state=state,
            retriever=self.retriever,
            config=self.config,
            ablation=self.ablation,
            verifier=self.verifier,
            dedup=DedupIndex(self.config.dedup_threshold),
        )

    def step(self, tool_calls: list[ToolCall]) -> Observation:
        state = self.state
        calls = list(tool_calls)  # read once: a policy may hand over any iterable
        if state.done:
            return self._after_end(calls)
        state.turn += 1
        runner = self._runner
        assert runner is not None
        runner.begin_turn()
        self._acted = False
        results = self._run_calls(calls, runner)
        failed = sum(1 for r in results if not r.ok)
        state.format_errors += failed
        state.error_streak = state.error_streak + 1 if failed == len(results) else 0
        if self._acted or self.config.count_every_step:
            state.turns_used += 1
        self._check_limits()
        observation = self._observe(results, calls)
        observation.info.update(
            new_shown=list(runner.new_shown),
            curation_events=[_event_json(e) for e in state.curation_log[runner.events_from :]],
            format_errors=failed,
        )
        return observation

    def _run_calls(self, calls: list[ToolCall], runner: ToolRunner) -> list[ToolResult]:
        if not calls:
            return [_failure("", "", f"no tool call in this turn; call a tool, or {END_SEARCH}")]
        results = []
        for index, call in enumerate(calls):
            if self.state.done:
                results.append(_skipped(call))
            elif index >= self.config.max_calls_per_turn:
                limit = self.config.max_calls_per_turn
                results.append(
                    _failure(
                        call.call_id,
                        str(call.name),
                        f"not run: at most {limit} tool calls per turn",
                    )
                )
            else:
                results.append(self._run_one(call, runner))
        return results

    def _run_one(self, call: ToolCall, runner: ToolRunner) -> ToolResult:
        name = str(call.name)
        spec = self._specs.get(name)
        if spec is None:
            available = ", ".join(self._specs)
            return _failure(
                call.call_id, name, f"unknown tool {name!r}; available tools: {available}"
            )
        if spec.mechanism and not getattr(self.ablation, spec.mechanism):
            # Not a format error: the call fits the interface, the condition lacks the tool.
            # It is not counted as a use of the tool (tool diversity) either.
            self._acted = True
            return ToolResult(
                call_id=call.call_id,
                name=name,
                content=f"{name} is unavailable in this condition "
                f"({spec.mechanism} is switched off); nothing was done",
            )
        try:
            arguments = parse_arguments(spec, call.arguments)
            content = runner.run(name, arguments)
        except (ArgumentError, ToolFailure, PatternError) as exc:
            return _failure(call.call_id, name, str(exc))
        if name != END_SEARCH:
            self._acted = True
        counts = self.state.tool_counts
        counts[name] = counts.get(name, 0) + 1
        return ToolResult(call_id=call.call_id, name=name, content=content)

    def _check_limits(self) -> None:
        state = self.state
        if state.done:
            return
        if state.error_streak >= self.config.max_format_error_turns:
            self._end("format_errors")
        elif state.turns_used >= self.config.max_turns:
            self._end("max_turns")

    def _end(self, reason: str) -> None:
        self.state.done = True
        self.state.termination_reason = reason

    def _observe(self, results: list[ToolResult], calls: list[ToolCall]) -> Observation:
        state = self.state
        results_text = _results_text(results)
        if self._exact is None:  # rerender: the policy owns the context and its budget
            working_memory = self._render()
        else:
            working_memory = self._count_context(results_text, calls)
        terminated, truncated = ending(state.done, state.termination_reason)
        return Observation(
            turn=state.turn,
            text=_compose(results_text, working_memory),
            tool_results=results,
            working_memory=working_memory,
            terminated=terminated,
            truncated=truncated,
            termination_reason=state.termination_reason,
            info={"tokens_used": state.tokens_used},
        )

    def _count_context(self, results_text: str, calls: list[ToolCall]) -> str:
        """Append mode: add this turn's action and results to `tokens_used` before
        rendering, so the budget line in the WM already includes them, then the WM once it
        exists; ends the episode when the context passes the limit. Returns the WM."""
        state = self.state
        state.tokens_used += self._action_tokens(calls) + self._count(results_text)
        if not self.config.wm_in_history:
            state.tokens_used -= state.wm_tokens  # the previous WM leaves the prompt
        working_memory = self._render()
        over = state.tokens_used + self._count(working_memory) > self.config.context_token_limit
        if over and not state.done:
            # Rare (once per episode at most): re-render so the WM says why it ended.
            self._end("context_budget")
            working_memory = self._render()
        state.wm_tokens = self._count(working_memory)
        state.tokens_used += state.wm_tokens
        return working_memory

    def _after_end(self, tool_calls: list[ToolCall]) -> Observation:
        """A step after the end changes nothing; it answers every call so transcripts stay valid."""
        message = f"the episode has ended ({self.state.termination_reason}); nothing was run"
        results = [
            ToolResult(c.call_id, str(c.name), f"ERROR: {message}", ok=False, error=message)
            for c in tool_calls
        ]
        working_memory = self._render()
        terminated, truncated = ending(True, self.state.termination_reason)
        return Observation(
            turn=self.state.turn,
            text=_compose(_results_text(results), working_memory),
            tool_results=results,
            working_memory=working_memory,
            terminated=terminated,
            truncated=truncated,
            termination_reason=self.state.termination_reason,
        )

    def _action_tokens(self, calls: list[ToolCall]) -> int:
        pieces = [piece for call in calls for piece in _action_pieces(call)]
        if self._exact:
            return self._count("".join(pieces))  # one tokenizer request for the turn
        return sum(self._count(piece) for piece in pieces)

    def _render(self) -> str:
        return render_working_memory(
            self.state, self.config, self.ablation, exact_tokens=self._exact
        )


def _failure(call_id: str, name: str, message: str) -> ToolResult:
    return ToolResult(
        call_id=call_id, name=name, content=f"ERROR: {message}", ok=False, error=message
    )


def _skipped(call: ToolCall) -> ToolResult:
    # Not a format error: the model ended the search earlier in the same turn.
    return ToolResult(
        call.call_id, str(call.name), f"not run: {END_SEARCH} was called earlier in this turn"
    )


def _compose(results_text: str, working_memory: str) -> str:
    return f"{results_text}\n\n{working_memory}" if results_text else working_memory


def _results_text(results: list[ToolResult]) -> str:
    return "\n\n".join(f"[{r.name or 'no tool'}] {r.content}" for r in results)


def _action_pieces(call: ToolCall) -> tuple[str, str]:
    """What the model emitted for one call, as counted: the tool name and its JSON arguments."""
    arguments = call.arguments
    if not isinstance(arguments, str):
        try:
            arguments = json.dumps(arguments, ensure_ascii=False)
        except (TypeError, ValueError):
            arguments = str(arguments)
    return str(call.name), arguments


def _event_json(event: CurationEvent) -> JSONObject:
    return {
        "turn": event.turn,
        "kind": event.kind,
        "doc_id": event.doc_id,
        "importance": event.importance,
        "detail": event.detail,
    }
