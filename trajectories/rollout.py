"""Run one episode for the worker: build the harness and policy, play, persist as it goes.

The pure harness does the work (`iter_episode`); this module adapts it to the database
through rollouts.py, so a turn is a row as soon as it happens.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from django.conf import settings
from django.db import OperationalError

from harness_app.harness.ablation import Ablation
from harness_app.harness.answers import query_answers
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.llm.chat_policy import ChatPolicy, ChatPolicyConfig
from harness_app.harness.llm.client import ChatClient, Sampling
from harness_app.harness.llm.verifier import LLMVerifier
from harness_app.harness.policies import rule_policy
from harness_app.harness.policies.base import Policy
from harness_app.harness.reader import (
    Reader,
    ReaderConfig,
    answer_fields,
    curated_order,
    documents_of,
    served_model,
)
from harness_app.harness.retrieval.rerank import RerankingRetriever
from harness_app.harness.reward import RewardWeights
from harness_app.harness.runner import iter_episode
from harness_app.harness.state import HarnessStateJson
from harness_app.harness.types import QuerySpec, Retriever
from harness_app.models import ContextMode, PolicyConfig, PolicyKind, Query, VerifierKind
from harness_app.policy_hosts import (
    model_server_api_key,
    model_server_pool,
    policy_base_url,
    service_base_url,
)
from trajectories.models import Episode, RolloutBatch
from trajectories.services import rollouts
from trajectories.services.verifier_calls import verifier_calls_record

# One retry for the harness's services: a server that is down fails the episode in
# seconds, one that hangs within 2 x VLLM_TIMEOUT_S.
SERVICE_RETRIES = 1


def query_spec(query: Query) -> QuerySpec:
    qrels = dict(query.qrels.values_list("document__external_id", "grade"))
    answers = query_answers(query.answer, query.metadata)
    return QuerySpec(query.external_id, query.text, query.answer, qrels, answers)


def policy_version(config: PolicyConfig) -> str:
    if config.kind != PolicyKind.BASELINE:
        return f"{config.name}@{config.model}"
    temperature = config.rule_temperature
    return "baseline" if temperature == 0 else f"baseline_sampled@{temperature:g}"


def episode_seed(episode: Episode, batch: RolloutBatch) -> int:
    """What seeds a sampling rule policy: the config's own `seed`, the sample index and an
    evaluation run's index, so samples and runs differ and a rerun repeats them."""
    base = (batch.policy.sampling or {}).get("seed", 0)
    run = batch.evaluation_run_index or 0
    return int(base) + run * batch.samples_per_query + episode.sample_index


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
    *,
    seed: int = 0,
) -> Policy:
    if config.kind == PolicyKind.BASELINE:
        # The baseline must only call tools this episode's ablation offers.
        names = [t["function"]["name"] for t in tools]
        return rule_policy(tools=names, temperature=config.rule_temperature, seed=seed)
    base_url = policy_base_url(config)
    api_key = model_server_api_key(base_url)
    client = ChatClient(
        base_url,
        config.model,
        timeout_s=settings.VLLM_TIMEOUT_S,
        api_key=api_key or "EMPTY",
        policy_version=policy_version(config),
        capture_tokens=batch.capture_tokens,
        # The local vLLM's replicas share the episode's calls (policy_hosts.py).
        upstreams=model_server_pool(base_url, api_key=api_key),
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


@functools.cache
def _reader_model(base_url: str, configured: str) -> str:
    # Asked once per worker process: the served model does not change under a deployment.
    return configured or served_model(base_url, api_key=settings.READER_API_KEY or "EMPTY")


def episode_answer(spec: QuerySpec, env: SearchHarness, retriever: Retriever) -> dict[str, Any]:
    """The reader's answer on the episode's curated set and its scores, when READER_BASE_URL
    is set; {} otherwise. A reader that cannot be reached is recorded in the metrics
    (`reader.error`) and leaves the episode as it is."""
    base_url = str(settings.READER_BASE_URL)
    if not base_url:
        return {}
    try:
        model = _reader_model(base_url, str(settings.READER_MODEL))
    except ValueError as exc:
        return {"reader_answer": "", "reader": {"error": str(exc)}}
    config = ReaderConfig(
        base_url=base_url,
        model=model,
        api_key=settings.READER_API_KEY or "EMPTY",
        max_context_chars=settings.READER_CONTEXT_CHARS,
        timeout_s=settings.VLLM_TIMEOUT_S,
    )
    documents = documents_of(retriever, curated_order(env.state.curated))
    with Reader(config) as reader:
        return answer_fields(reader, spec, documents)


def verifier_build(config: PolicyConfig, batch: RolloutBatch) -> LLMVerifier | None:
    """The episode's LLM verifier, or None: the harness's lexical verifier."""
    if config.verifier != VerifierKind.LLM:
        return None
    base_url = service_base_url(config, "verifier_base_url")
    return LLMVerifier(
        base_url,
        config.verifier_model,
        timeout_s=settings.VLLM_TIMEOUT_S,
        api_key=model_server_api_key(base_url) or "EMPTY",
        # Token ids need vLLM; a batch without token capture may use any server.
        capture_tokens=batch.capture_tokens,
        retries=SERVICE_RETRIES,
    )


def retriever_reranked(retriever: Retriever, config: PolicyConfig) -> Retriever:
    """`retriever` behind the config's reranker, or as it is when none is set."""
    if not config.reranker_model:
        return retriever
    base_url = service_base_url(config, "reranker_base_url")
    return RerankingRetriever(
        retriever,
        base_url,
        config.reranker_model,
        timeout_s=settings.VLLM_TIMEOUT_S,
        api_key=model_server_api_key(base_url) or "EMPTY",
    )


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
    batch = episode.rollout_parts()[0]
    started = time.perf_counter()
    retriever = retriever_reranked(
        corpus_searcher(batch.benchmark.corpus, batch.policy.retriever), batch.policy
    )
    with SearchHarness(
        retriever,
        config=harness_config(batch.policy, batch),
        ablation=Ablation.from_json(batch.ablation),
        verifier=verifier_build(batch.policy, batch),
    ) as env:
        return _run(claim, episode, env, started)


def _run(claim: rollouts.Claim, episode: Episode, env: SearchHarness, started: float) -> str:
    batch, group, query = episode.rollout_parts()
    policy = policy_build(
        batch.policy,
        batch,
        env.tool_schemas(),
        group.prefix_messages,
        seed=episode_seed(episode, batch),
    )
    if isinstance(policy, ChatPolicy):
        # The budget in real tokens: the policy model's tokenizer counts the context.
        env.set_token_counter(policy.token_counter())
    setup_s = time.perf_counter() - started
    spec = query_spec(query)
    run = iter_episode(
        env,
        policy,
        spec,
        max_turns=env.config.max_steps,  # a guard: the harness ends the episode itself
        weights=RewardWeights.from_json(batch.reward_weights),
    )
    cancelled = False
    previous: HarnessStateJson | None = None
    for record in run:
        rollouts.turn_record(claim=claim, turn=record, previous_state=previous)
        if record.calls.verifier:
            verifier_calls_record(
                episode=claim.episode, turn_index=record.turn, calls=record.calls.verifier
            )
        previous = record.state
        if rollouts.episode_is_cancelled(claim=claim):
            cancelled = True
            break
    result = run.result()
    # The calls of a step that broke off: e.g. the failed final call, or a verifier's.
    rollouts.model_calls_record(claim=claim, calls=result.unrecorded_calls.model)
    if result.unrecorded_calls.verifier:
        verifier_calls_record(
            episode=claim.episode,
            turn_index=env.state.turn,
            calls=result.unrecorded_calls.verifier,
        )
    reason = "cancelled" if cancelled else result.termination_reason or "unknown"
    ended_well = not cancelled and reason not in rollouts.FAILURE_REASONS
    answer = episode_answer(spec, env, env.retriever) if ended_well else {}
    outcome = rollouts.EpisodeOutcome(
        termination_reason=reason,
        policy_version=policy_version(batch.policy),
        metrics=result.metrics,
        reward=result.reward,
        timings=rollouts.EpisodeTimings(setup_s=setup_s, episode_s=time.perf_counter() - started),
        state=env.state,
        error=result.error,
        answer=answer,
    )
    finished = rollouts.episode_finish(claim=claim, outcome=outcome)
    return f"{reason} ({'recorded' if finished else 'superseded by another attempt'})"
