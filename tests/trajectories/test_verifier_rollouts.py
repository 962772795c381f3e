"""Rollouts with the LLM verifier and the reranker a policy config names.

The verifier's calls are stored as VerifierCall rows, apart from the policy's ModelCalls,
so exports and RL batches never train on them; a verifier that is down fails the episode
with a reason naming its URL. The servers are the project's fake OpenAI-compatible one.
"""

from __future__ import annotations

import itertools
import json
import socket

import pytest

from harness_app import queues
from harness_app.harness.llm.verifier import SYSTEM_PROMPT
from harness_app.models import PolicyConfig, PolicyKind
from tests.factories import batch_played
from tests.fakes.openai_server import FakeOpenAIServer
from tests.vllm import VLLM_URL, needs_vllm
from training.rl.samples import rl_episodes_for_batch
from training.sft.records import records_render, rows_load
from trajectories.models import EpisodeStatus, ModelCall, Verification, VerifierCall
from trajectories.selectors.calls import call_tokens_by_episode
from trajectories.services.rollouts import rollout_queue

pytestmark = pytest.mark.django_db

RATIONALE = "the document names the inventor and the town"
JUDGE = f"verdict: yes\nrationale: {RATIONALE}"
SEARCH = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
VERIFY = {
    "tool": "verify",
    "arguments": {"claim": "Edda Vell invented the Vell lamp", "doc_ids": ["Vell_lamp"]},
}
END = {"tool": "end_search", "arguments": {"reasoning": "done"}}


def _is_judge(body: dict) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and messages[0].get("content") == SYSTEM_PROMPT


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _judged_baseline(url: str) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="baseline-judged",
        kind=PolicyKind.BASELINE,
        verifier="llm",
        verifier_base_url=url,
        verifier_model="judge",
    )


def test_a_baseline_with_the_llm_verifier_stores_each_judgement_apart_from_model_calls(
    demo_benchmark, researcher_client
):
    with FakeOpenAIServer(reply=lambda n, body: JUDGE) as fake:
        policy = _judged_baseline(fake.base_url)
        batch = batch_played(demo_benchmark, policy, query_limit=1)
    episode = batch.episodes.get()
    assert episode.status == EpisodeStatus.COMPLETED
    calls = list(VerifierCall.objects.filter(episode=episode))
    (verify_turn,) = [
        t for t in episode.turn_rows.all() if any(c["name"] == "verify" for c in t.tool_calls)
    ]
    judged = verify_turn.tool_calls[0]["arguments"]["doc_ids"]
    assert [c.doc_id for c in calls] == judged and len(fake.requests) == len(judged)
    assert {(c.turn_index, c.verdict, c.rationale, c.model) for c in calls} == {
        (verify_turn.index, "supported", RATIONALE, "judge")
    }
    assert all(c.prompt_tokens == len(c.prompt_token_ids) > 0 for c in calls)
    assert all(c.completion_tokens == len(c.completion_token_ids) > 0 for c in calls)
    assert not ModelCall.objects.filter(episode=episode).exists()  # the baseline samples none
    stored = Verification.objects.filter(episode=episode)
    assert {(v.verdict, tuple(v.evidence)) for v in stored} == {("supported", (RATIONALE,))}
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert "Verifier calls" in page and RATIONALE in page
    assert rollout_queue(policy) == queues.ROLLOUTS_LLM  # it waits on a server


def test_a_verifier_that_is_down_fails_the_episode_naming_its_url(demo_benchmark):
    url = _closed_port_url()
    batch = batch_played(demo_benchmark, _judged_baseline(url), query_limit=1)
    episode = batch.episodes.get()
    assert episode.status == EpisodeStatus.FAILED
    assert episode.termination_reason == "verifier_unreachable"
    assert f"verifier at {url} unreachable" in episode.error
    failed = VerifierCall.objects.filter(episode=episode)
    assert failed.count() == 2  # the try and its one retry, kept with their errors
    assert all(c.error.startswith("model_unreachable") and c.verdict == "" for c in failed)
    last_turn = episode.turn_rows.order_by("-index").values_list("index", flat=True)[0]
    assert {c.turn_index for c in failed} == {last_turn + 1}  # the step that broke off


def test_exports_and_rl_batches_take_only_the_policys_calls(demo_benchmark):
    actions = itertools.cycle([SEARCH, VERIFY, END])

    def reply(n: int, body: dict) -> str:
        return JUDGE if _is_judge(body) else json.dumps(next(actions))

    with FakeOpenAIServer(reply=reply) as fake:
        policy = PolicyConfig.objects.create(
            name="llm-judged",
            kind=PolicyKind.OPENAI,
            base_url=fake.base_url,
            model="fake-model",
            tool_call_format="json_schema",
            verifier="llm",
            verifier_model="fake-model",
            verifier_base_url=fake.base_url,
        )
        batch = batch_played(demo_benchmark, policy, query_limit=1, max_turns=4)
    episode = batch.episodes.get()
    assert episode.status == EpisodeStatus.COMPLETED, episode.error
    judge = VerifierCall.objects.get(episode=episode)
    assert judge.verdict == "supported" and judge.prompt_token_ids
    policy_calls = ModelCall.objects.filter(episode=episode)
    assert policy_calls.count() == 3  # search, verify, end: no judge among them
    tokens = call_tokens_by_episode(ModelCall.objects.filter(episode=episode).order_by("pk"))
    assert [c.call_id for c in tokens[episode.pk]] == list(
        policy_calls.order_by("pk").values_list("pk", flat=True)
    )
    ((_, rendered),) = records_render(rows_load([episode], fmt="tokens"), fmt="tokens")
    exported = [t for record in rendered.records for t in record["input_ids"]]
    assert exported and _contains(exported, judge.prompt_token_ids[:40]) is False
    candidates, _ = rl_episodes_for_batch(batch=batch)
    (sample,) = candidates
    assert {c.call_id for c in sample.calls} == set(policy_calls.values_list("pk", flat=True))


def _contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def test_a_policy_with_a_reranker_has_its_searches_reordered(demo_benchmark):
    with FakeOpenAIServer(rerank_score=lambda q, text: float("Tamsbury" in text)) as fake:
        policy = PolicyConfig.objects.create(
            name="baseline-reranked",
            kind=PolicyKind.BASELINE,
            reranker_base_url=fake.base_url,
            reranker_model="reranker",
        )
        batch = batch_played(demo_benchmark, policy, query_limit=1)
    episode = batch.episodes.get()
    assert episode.status == EpisodeStatus.COMPLETED
    reranks = [r for r in fake.requests if r["path"] == "/v1/rerank"]
    assert reranks and all(r["body"]["model"] == "reranker" for r in reranks)


def test_a_reranker_without_the_api_fails_the_episode_with_a_clear_reason(demo_benchmark):
    with FakeOpenAIServer() as fake:  # a generative model: neither /rerank nor /score
        policy = PolicyConfig.objects.create(
            name="baseline-bad-reranker",
            kind=PolicyKind.BASELINE,
            reranker_base_url=fake.base_url,
            reranker_model="chat-model",
        )
        batch = batch_played(demo_benchmark, policy, query_limit=1)
    episode = batch.episodes.get()
    assert (episode.status, episode.termination_reason) == (EpisodeStatus.FAILED, "reranker_error")
    assert fake.base_url in episode.error and "neither /rerank nor /score" in episode.error


@needs_vllm
def test_a_rollout_judged_by_the_real_vllm_stores_each_call_token_by_token(
    demo_benchmark, served_model
):
    policy = PolicyConfig.objects.create(
        name="baseline-judged-live",
        kind=PolicyKind.BASELINE,
        verifier="llm",
        verifier_base_url=VLLM_URL,
        verifier_model=served_model,
    )
    episode = batch_played(demo_benchmark, policy, query_limit=1).episodes.get()
    assert episode.status == EpisodeStatus.COMPLETED, episode.error
    calls = list(VerifierCall.objects.filter(episode=episode))
    # A call that timed out on a busy server is kept with its error, then retried once.
    judged = [c for c in calls if not c.error]
    assert judged and all(c.verdict == "" for c in calls if c.error)
    assert {c.doc_id for c in judged} == {c.doc_id for c in calls}
    # SmolLM2-135M rarely names a verdict: "unclear" with its raw answer is the usual case.
    assert {c.verdict for c in judged} <= {"supported", "unsupported", "unclear"}
    assert all(c.completion for c in judged)
    assert all(c.prompt_tokens == len(c.prompt_token_ids) > 0 for c in judged)
    assert all(c.completion_tokens == len(c.completion_token_ids) > 0 for c in judged)
