"""The built-in trainer takes a step on a rerender episode's per-call samples (offline: the
episode is played against the fake server, whose token ids are characters; the trainer is
the real SmolLM2-135M on CPU)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from harness_app.models import ContextMode, PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from training.rl.batches import build_sequences
from training.rl.samples import rl_episodes_for_batch
from trajectories.models import ModelCall
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


def _reply(n: int, body: dict[str, Any]) -> str:
    if n > 4:
        return '<tool_call>{"name": "end_search", "arguments": {}}</tool_call>'
    call = {"name": "search_corpus", "arguments": {"query": f"lamp {n}"}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def test_a_cispo_step_on_per_call_samples_moves_each_turns_completion(demo_benchmark, smollm2_dir):
    with FakeOpenAIServer(reply=_reply) as fake:
        policy = PolicyConfig.objects.create(
            name="rerender",
            kind=PolicyKind.OPENAI,
            base_url=fake.base_url,
            model="m",
            context_mode=ContextMode.RERENDER,
            context_limit=1200,  # one token per character here: a tight cap
        )
        batch = batch_create(benchmark=demo_benchmark, policy=policy, query_limit=1, max_turns=8)
        episode = batch.episodes.get()
        episode_run(episode_id=episode.pk)
    calls = list(ModelCall.objects.filter(episode=episode, error="").order_by("pk"))
    assert len(calls) == 5 and all(len(c.prompt_token_ids) <= 1200 for c in calls)
    candidates, _ = rl_episodes_for_batch(batch=batch)
    built = build_sequences(candidates, {episode.pk: 1.0}).sequences
    assert [s.segment_idx for s in built] == [0, 1, 2, 3, 4]
    # Two turns, each prompt's last 64 tokens as context: enough to show each turn trains
    # as its own sequence, and a short step on a CPU.
    sequences = [dataclasses.replace(s, prompt_ids=s.prompt_ids[-64:]) for s in built[:2]]

    from training.rl.trainer import PolicyTrainer, TrainSettings

    trainer = PolicyTrainer(smollm2_dir, settings=TrainSettings(loss="cispo", lr=1e-3))
    before = [sum(lp) for lp in trainer.recompute_logprobs(sequences)]
    metrics = trainer.train_step(sequences)
    after = [sum(lp) for lp in trainer.recompute_logprobs(sequences)]
    assert metrics.sequences == 2
    assert metrics.tokens == sum(len(c.completion_token_ids) for c in calls[:2])
    # A positive advantage raises every turn's own completion, each in its own sequence.
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
