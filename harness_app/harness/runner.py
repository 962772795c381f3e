"""Play one episode of a policy against the harness and record every turn.

Pure: no I/O, no persistence. The CLI collects the records in memory; the Celery rollout
worker iterates an `EpisodeRun` and saves each `TurnRecord` as soon as it is yielded, so a
crashed or slow episode still shows its turns in the UI.

A turn's record carries the outside calls made for it (`StepCalls`): the policy's model
calls and the harness's verifier calls, taken from whichever of them records its calls
(`types.CallRecorder`). Calls of a step that broke off (a policy that gave up after failed
calls, a verifier whose service failed) belong to no turn; the result carries them.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from harness_app.harness.metrics import (
    EpisodeMetrics,
    EpisodeStateLike,
    RecallSoFar,
    metrics_from_state,
    recall_so_far_from_state,
)
from harness_app.harness.policies.base import Policy, PolicyError
from harness_app.harness.reward import RewardBreakdown, RewardWeights, compute_reward
from harness_app.harness.state import HarnessStateJson
from harness_app.harness.types import (
    CallRecorder,
    JSONObject,
    Observation,
    QuerySpec,
    ServiceError,
    ToolCall,
    ToolCallJson,
    ToolResultJson,
)

if TYPE_CHECKING:
    from harness_app.harness.llm.client import ModelCallRecord
    from harness_app.harness.llm.verifier import VerifierCallRecord

# Termination reasons the runner itself sets; the environment's own reasons pass through.
POLICY_ERROR = "policy_error"
RUNNER_TURN_CAP = "runner_turn_cap"


class HarnessStateLike(EpisodeStateLike, Protocol):
    """What the runner reads from the environment's state: the scored parts and a snapshot."""

    def to_json(self) -> HarnessStateJson: ...


class HarnessConfigLike(Protocol):
    @property
    def max_turns(self) -> int: ...


class HarnessLike(Protocol):
    """The gym-like surface of SearchHarness that an episode needs."""

    @property
    def state(self) -> HarnessStateLike: ...

    @property
    def config(self) -> HarnessConfigLike: ...

    def reset(self, query: QuerySpec) -> Observation: ...

    def step(self, calls: list[ToolCall]) -> Observation: ...

    def take_verifier_calls(self) -> list[VerifierCallRecord]: ...


@dataclass(frozen=True, slots=True)
class StepCalls:
    """The outside calls of one step: the policy's model calls, each with the turn it was
    made for, and the verifier's calls to its model."""

    model: list[tuple[int, ModelCallRecord]] = field(default_factory=list)
    verifier: list[VerifierCallRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn as it happened. Turn 0 is the reset: no calls, the opening observation."""

    turn: int
    tool_calls: list[ToolCallJson]
    tool_results: list[ToolResultJson]
    observation_text: str
    working_memory: str
    state: HarnessStateJson
    recall: RecallSoFar
    policy_seconds: float
    env_seconds: float
    terminated: bool
    truncated: bool
    termination_reason: str
    info: dict[str, Any] = field(default_factory=dict)
    calls: StepCalls = field(default_factory=StepCalls)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def to_json(self) -> JSONObject:
        # The calls are stored apart (ModelCall and VerifierCall rows), never inline.
        data = asdict(replace(self, calls=StepCalls()))
        del data["calls"]
        data["recall"] = self.recall.to_json()
        data["done"] = self.done
        return data


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    query_id: str
    policy: str
    turns: list[TurnRecord]
    metrics: EpisodeMetrics
    reward: RewardBreakdown
    termination_reason: str
    curated_ids: list[str]
    seconds: float
    error: str = ""  # the PolicyError or ServiceError message when the episode broke off
    # The calls of a step that broke off, which no TurnRecord carries.
    unrecorded_calls: StepCalls = field(default_factory=StepCalls)

    def to_json(self, *, with_turns: bool = True) -> JSONObject:
        """JSON-ready dict; without turns it is a compact per-query row for reports."""
        data: dict[str, Any] = {
            "query_id": self.query_id,
            "policy": self.policy,
            "termination_reason": self.termination_reason,
            "error": self.error,
            "curated_ids": self.curated_ids,
            "seconds": self.seconds,
            "metrics": self.metrics.to_json(),
            "reward": self.reward.to_json(),
        }
        if with_turns:
            data["turns"] = [t.to_json() for t in self.turns]
        return data


class EpisodeRun:
    """One episode in progress: iterate it for TurnRecords, then ask for `result()`.

    `max_turns` caps the policy's steps from the runner's side, on top of the budget the
    environment enforces itself (a guard against a policy or env that never stops). It
    counts steps, not the environment's counted turns, so a cap meant never to cut an
    episode short is `HarnessConfig.max_steps`, not `max_turns`.
    """

    def __init__(
        self,
        env: HarnessLike,
        policy: Policy,
        query: QuerySpec,
        *,
        max_turns: int | None = None,
        weights: RewardWeights | None = None,
    ) -> None:
        self.env, self.policy, self.query = env, policy, query
        self.max_turns = max_turns
        self.weights = weights or RewardWeights()
        self.records: list[TurnRecord] = []
        self.termination_reason = ""
        self.error = ""
        self._started_at: float | None = None
        self._seconds: float | None = None

    def __iter__(self) -> Iterator[TurnRecord]:
        if self._started_at is not None:
            raise RuntimeError("an EpisodeRun can be iterated only once")
        self._started_at = time.perf_counter()
        yield from self._play()
        self._seconds = time.perf_counter() - self._started_at

    @property
    def seconds(self) -> float:
        """Wall time so far; final once the episode is played out (or abandoned)."""
        if self._seconds is not None:
            return self._seconds
        return 0.0 if self._started_at is None else time.perf_counter() - self._started_at

    def _play(self) -> Iterator[TurnRecord]:
        self.policy.reset(self.query.text)
        started = time.perf_counter()
        observation = self.env.reset(self.query)
        yield self._record([], observation, 0.0, time.perf_counter() - started)
        steps = 0
        while not observation.done:
            if self.max_turns is not None and steps >= self.max_turns:
                self.termination_reason = RUNNER_TURN_CAP
                return
            stepped = yield from self._step(observation)
            if stepped is None:
                return
            observation = stepped
            steps += 1
        self.termination_reason = observation.termination_reason

    def _step(self, observation: Observation) -> Generator[TurnRecord, None, Observation | None]:
        """One policy action and env step; None when the policy gave up instead, or when a
        service the harness calls (an LLM verifier, a reranker) failed during the step. That
        step is not recorded as a turn; the episode ends with the service's reason.

        A generator so that `_play` stays flat; it yields at most one record.
        """
        started = time.perf_counter()
        try:
            calls = self.policy.act(observation, self.env.state)
        except PolicyError as exc:
            self.termination_reason = exc.reason or POLICY_ERROR
            self.error = str(exc) or type(exc).__name__
            return None
        acted = time.perf_counter()
        try:
            observation = self.env.step(calls)
        except ServiceError as exc:
            self.termination_reason = exc.reason
            self.error = str(exc)
            return None
        yield self._record(calls, observation, acted - started, time.perf_counter() - acted)
        return observation

    def _record(
        self, calls: list[ToolCall], obs: Observation, policy_s: float, env_s: float
    ) -> TurnRecord:
        record = TurnRecord(
            turn=obs.turn,
            tool_calls=[c.to_json() for c in calls],
            tool_results=[r.to_json() for r in obs.tool_results],
            observation_text=obs.text,
            working_memory=obs.working_memory,
            state=self.env.state.to_json(),
            recall=recall_so_far_from_state(self.env.state, self.query),
            policy_seconds=policy_s,
            env_seconds=env_s,
            terminated=obs.terminated,
            truncated=obs.truncated,
            termination_reason=obs.termination_reason,
            info=dict(obs.info),
            calls=self._take_calls(),
        )
        self.records.append(record)
        return record

    def _take_calls(self) -> StepCalls:
        policy = self.policy
        model = policy.take_calls() if isinstance(policy, CallRecorder) else []
        return StepCalls(model=model, verifier=self.env.take_verifier_calls())

    def result(self) -> EpisodeResult:
        """Metrics and reward of the episode as it stands.

        Plays the episode out first if it was never iterated; a caller that stopped
        iterating early (a cancelled rollout) gets the scores of the state it left.
        """
        if self._started_at is None:
            for _ in self:
                pass
        metrics = metrics_from_state(self.env.state, self.query, beta=self.weights.beta)
        return EpisodeResult(
            query_id=self.query.query_id,
            policy=getattr(self.policy, "name", type(self.policy).__name__),
            turns=list(self.records),
            metrics=metrics,
            reward=compute_reward(
                metrics,
                max_turns=self.env.config.max_turns,
                weights=self.weights,
                termination_reason=self.termination_reason,
            ),
            termination_reason=self.termination_reason,
            curated_ids=sorted(self.env.state.curated_ids()),
            seconds=self.seconds,
            error=self.error,
            unrecorded_calls=self._take_calls(),
        )


def iter_episode(
    env: HarnessLike,
    policy: Policy,
    query: QuerySpec,
    *,
    max_turns: int | None = None,
    weights: RewardWeights | None = None,
) -> EpisodeRun:
    """An iterable of TurnRecords, yielded as each turn completes; `.result()` at the end."""
    return EpisodeRun(env, policy, query, max_turns=max_turns, weights=weights)


def run_episode(
    env: HarnessLike,
    policy: Policy,
    query: QuerySpec,
    *,
    max_turns: int | None = None,
    weights: RewardWeights | None = None,
) -> EpisodeResult:
    """Play a whole episode and score it."""
    return iter_episode(env, policy, query, max_turns=max_turns, weights=weights).result()
