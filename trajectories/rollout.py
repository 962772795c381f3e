"""Run one episode for the worker: build the harness and policy, play, persist as it goes.

The pure harness does the work (`iter_episode`); this module adapts it to the database
through rollouts.py, so a turn is a row as soon as it happens.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import OperationalError

from harness_app.harness.ablation import Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.llm.chat_policy import ChatPolicy, ChatPolicyConfig
from harness_app.harness.llm.client import ChatClient, ModelCallRecord, Sampling
from harness_app.harness.policies import make_policy
from harness_app.harness.policies.base import Policy
from harness_app.harness.reward import RewardWeights
from harness_app.harness.runner import iter_episode
from harness_app.harness.state import HarnessStateJson
from harness_app.harness.types import QuerySpec
from harness_app.models import ContextMode, PolicyConfig, PolicyKind, Query
from harness_app.policy_hosts import policy_base_url
from trajectories.models import Episode, RolloutBatch
from trajectories.services import rollouts


def query_spec(query: Query) -> QuerySpec:
    qrels = dict(query.qrels.values_list("document__external_id", "grade"))
    return QuerySpec(query.external_id, query.text, query.answer, qrels)


def policy_version(config: PolicyConfig) -> str:
    return "baseline" if config.kind == PolicyKind.BASELINE else f"{config.name}@{config.model}"


def model_server_api_key(base_url: str) -> str:
    """VLLM_API_KEY for the configured model server, TEACHER_API_KEY for the configured
    teacher server, "" for any other: a researcher's policy may name its own server, which
    must not receive our keys."""
    url = base_url.rstrip("/")
    if url == settings.VLLM_BASE_URL.rstrip("/"):
        return str(settings.VLLM_API_KEY)
    teacher = str(settings.TEACHER_BASE_URL).rstrip("/")
    if teacher and url == teacher:
        return str(settings.TEACHER_API_KEY)
    return ""


def harness_config(config: PolicyConfig, batch: RolloutBatch) -> HarnessConfig:
    """The episode's harness settings. An LLM policy's context mode and limit decide who
    counts the context (budget.py); the baseline keeps the env's append-mode estimate."""
    if config.kind == PolicyKind.BASELINE:
        return HarnessConfig(max_turns=batch.max_turns)
    if config.context_mode == ContextMode.RERENDER:
        return HarnessConfig(max_turns=batch.max_turns, context_mode="rerender")
    if config.context_limit:
        return HarnessConfig(max_turns=batch.max_turns, context_token_limit=config.context_limit)
    return HarnessConfig(max_turns=batch.max_turns)


def policy_build(
    config: PolicyConfig,
    batch: RolloutBatch,
    tools: list[dict[str, Any]],
    prefix_messages: list[dict[str, Any]] | None = None,
) -> Policy:
    if config.kind == PolicyKind.BASELINE:
        # The baseline must only call tools this episode's ablation offers.
        return make_policy("baseline", tools=[t["function"]["name"] for t in tools])
    base_url = policy_base_url(config)
    client = ChatClient(
        base_url,
        config.model,
        timeout_s=settings.VLLM_TIMEOUT_S,
        api_key=model_server_api_key(base_url) or "EMPTY",
        policy_version=policy_version(config),
        capture_tokens=batch.capture_tokens,
    )
    chat_config = ChatPolicyConfig(
        system_prompt_version=config.system_prompt_version,
        tool_call_format=config.tool_call_format,
        tool_parser=config.tool_parser,
        termination_policy=batch.termination_policy,
        sampling=Sampling.from_json(config.sampling),
        retries=settings.VLLM_RETRIES,
        context_mode=config.context_mode,
        context_limit=config.context_limit,
        # Token-in needs vLLM's /tokenize and token ids; without token capture the policy
        # sends plain chat completions, which any OpenAI-compatible server takes.
        token_in=batch.capture_tokens,
    )
    return ChatPolicy(client, tools, chat_config, prefix_messages=prefix_messages)


def _drain(policy: Policy, sent: int) -> tuple[list[tuple[int, ModelCallRecord]], int]:
    calls = getattr(policy, "calls", [])
    return calls[sent:], len(calls)


def episode_run(*, episode_id: int) -> str:
    """Play the episode if it is ours to play; returns what happened, for the task log."""
    claim = rollouts.episode_claim(episode_id=episode_id)
    if claim is None:
        return "skipped: finished or running elsewhere"
    try:
        return _play(claim)
    except OperationalError:
        rollouts.episode_release(claim=claim)  # the task retries it with backoff
        raise


def _play(claim: rollouts.Claim) -> str:
    from harness_app.indexes import corpus_searcher

    episode_id = claim.episode.pk
    episode = Episode.objects.select_related(
        "batch__policy", "batch__benchmark__corpus", "query", "group"
    ).get(pk=episode_id)
    batch, group, query = episode.rollout_parts()
    started = time.perf_counter()
    retriever = corpus_searcher(batch.benchmark.corpus, batch.policy.retriever)
    env = SearchHarness(
        retriever,
        config=harness_config(batch.policy, batch),
        ablation=Ablation.from_json(batch.ablation),
    )
    policy = policy_build(batch.policy, batch, env.tool_schemas(), group.prefix_messages)
    if isinstance(policy, ChatPolicy):
        # The budget in real tokens: the policy model's tokenizer counts the context.
        env.set_token_counter(policy.token_counter())
    setup_s = time.perf_counter() - started
    run = iter_episode(
        env,
        policy,
        query_spec(query),
        max_turns=env.config.max_steps,  # a guard: the harness ends the episode itself
        weights=RewardWeights.from_json(batch.reward_weights),
    )
    sent = 0
    cancelled = False
    previous: HarnessStateJson | None = None
    for record in run:
        calls, sent = _drain(policy, sent)
        rollouts.turn_record(claim=claim, turn=record, calls=calls, previous_state=previous)
        previous = record.state
        if rollouts.episode_is_cancelled(claim=claim):
            cancelled = True
            break
    calls, sent = _drain(policy, sent)
    rollouts.model_calls_record(claim=claim, calls=calls)  # e.g. the failed final call
    result = run.result()
    reason = "cancelled" if cancelled else result.termination_reason or "unknown"
    outcome = rollouts.EpisodeOutcome(
        termination_reason=reason,
        policy_version=policy_version(batch.policy),
        metrics=result.metrics,
        reward=result.reward,
        timings=rollouts.EpisodeTimings(setup_s=setup_s, episode_s=time.perf_counter() - started),
        state=env.state,
        error=result.error,
    )
    finished = rollouts.episode_finish(claim=claim, outcome=outcome)
    return f"{reason} ({'recorded' if finished else 'superseded by another attempt'})"
