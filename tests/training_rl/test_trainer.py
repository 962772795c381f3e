"""The built-in trainer on the real SmolLM2-135M (CPU, float32) with a fresh LoRA adapter.

Each test loads its own trainer (about a second): a step changes the adapter.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from training.rl.batches import TrainSequence

torch = pytest.importorskip("torch", reason="the trainer needs torch (the 'train' extra)")


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _sequence(tokenizer, n, question, replies, advantage):
    """A chat prompt, then assistant replies separated by a (masked) tool result turn."""
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    tool_turn = _ids(tokenizer, "\n<|im_start|>user\nresult: ok<|im_end|>\n<|im_start|>assistant\n")
    response, mask = [], []
    for i, reply in enumerate(replies):
        if i:
            response += tool_turn
            mask += [0] * len(tool_turn)
        sampled = [*_ids(tokenizer, reply), tokenizer.convert_tokens_to_ids("<|im_end|>")]
        response += sampled
        mask += [1] * len(sampled)
    return TrainSequence(
        sample_id=f"{n}-0", group_id=n // 2, episode_id=n, segment_idx=0, policy_version="v0",
        prompt_ids=list(prompt), response_ids=response, loss_mask=mask,
        rollout_logprobs=[0.0] * len(response), reward=advantage, advantage=advantage,
        termination_reason="end_search",
    )  # fmt: skip


@pytest.fixture
def sequences(tokenizer):
    """Two queries, each with a sensible (A = +1) and a nonsense (A = −1) trajectory."""
    return [
        _sequence(tokenizer, 0, "Capital of France?", ["Searching.", "It is Paris."], 1.0),
        _sequence(tokenizer, 1, "Capital of France?", ["Bananas!", "Green trucks hum."], -1.0),
        _sequence(tokenizer, 2, "Name a prime.", ["Seven is prime."], 1.0),
        _sequence(tokenizer, 3, "Name a prime.", ["Purple elephants sing."], -1.0),
    ]


def _on_policy(trainer, sequences):
    """The sequences with rollout logprobs set to the model's own (ratio 1 everywhere)."""
    out = []
    for seq, logprobs in zip(sequences, trainer.recompute_logprobs(sequences), strict=True):
        it = iter(logprobs)
        rollout = [next(it) if m else 0.0 for m in seq.loss_mask]
        out.append(dataclasses.replace(seq, rollout_logprobs=rollout))
    return out


def _shift(seq, delta):
    """The sequence with every sampled token's rollout logprob moved by `delta`."""
    moved = [lp + delta * m for lp, m in zip(seq.rollout_logprobs, seq.loss_mask, strict=True)]
    return dataclasses.replace(seq, rollout_logprobs=moved)


def _trainer(smollm2_dir, **settings):
    from training.rl.trainer import PolicyTrainer, TrainSettings

    return PolicyTrainer(smollm2_dir, settings=TrainSettings(**settings))


def test_recomputed_logprobs_score_exactly_the_sampled_tokens(smollm2_dir, sequences):
    trainer = _trainer(smollm2_dir)
    seq = sequences[0]
    [logprobs] = trainer.recompute_logprobs([seq])
    assert len(logprobs) == seq.sampled_tokens < len(seq.response_ids)
    # The same numbers from a plain full forward pass: logits at t-1 predict token t.
    ids = torch.tensor([seq.input_ids])
    with torch.no_grad():
        full = torch.log_softmax(trainer.model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    every = full.gather(-1, ids[0, 1:, None])[:, 0]
    mask = torch.tensor([0] * len(seq.prompt_ids) + seq.loss_mask)[1:].bool()
    assert logprobs == pytest.approx(every[mask].tolist(), abs=1e-5)


def test_one_cispo_step_raises_positive_and_lowers_negative_sequences(smollm2_dir, sequences):
    # A high learning rate so one step on four short sequences moves them measurably.
    trainer = _trainer(smollm2_dir, loss="cispo", lr=1e-3)
    batch = _on_policy(trainer, sequences)
    before = [sum(lp) for lp in trainer.recompute_logprobs(batch)]
    metrics = trainer.train_step(batch)
    after = [sum(lp) for lp in trainer.recompute_logprobs(batch)]
    moved = [a - b for a, b in zip(after, before, strict=True)]
    assert moved[0] > 0 and moved[2] > 0, moved
    assert moved[1] < 0 and moved[3] < 0, moved
    assert metrics.tokens == sum(s.sampled_tokens for s in batch)
    assert metrics.sequences == 4
    assert metrics.logprob_gap < 1e-5  # on-policy: trainer and "sampler" agree
    assert metrics.clip_low_frac == metrics.clip_high_frac == 0.0
    assert metrics.entropy > 0 and metrics.grad_norm > 0


def test_step_metrics_report_the_logprob_gap_and_clipped_tokens(smollm2_dir, sequences):
    trainer = _trainer(smollm2_dir, loss="cispo", lr=1e-6, cispo_eps_low=0.2)
    a, b = _on_policy(trainer, sequences[2:])
    # Rollout logprobs 2 lower → ratio e² ≈ 7.4 > 5 (high clip); 0.5 higher → e^-0.5 ≈ 0.61 <
    # 0.8 (low clip with eps_low = 0.2).
    a, b = _shift(a, -2.0), _shift(b, 0.5)
    metrics = trainer.train_step([a, b])
    n_a, n_b = a.sampled_tokens, b.sampled_tokens
    assert metrics.logprob_gap == pytest.approx((2 * n_a + 0.5 * n_b) / (n_a + n_b), abs=1e-4)
    assert metrics.logprob_gap_max == pytest.approx(2.0, abs=1e-4)
    assert metrics.clip_high_frac == pytest.approx(n_a / (n_a + n_b))
    assert metrics.clip_low_frac == pytest.approx(n_b / (n_a + n_b))


def test_kl_to_the_base_policy_starts_at_zero_and_grows_after_a_step(smollm2_dir, sequences):
    trainer = _trainer(smollm2_dir, loss="grpo", lr=1e-3, kl_beta=0.005)
    batch = _on_policy(trainer, sequences)
    first = trainer.train_step(batch)
    # A fresh adapter's B matrices are zero: the policy is the base model exactly.
    assert first.kl == 0.0
    second = trainer.train_step(batch)
    assert second.kl > 0
    assert second.loss == pytest.approx(second.policy_loss + 0.005 * second.kl, rel=1e-5)


def test_a_saved_adapter_reloads_as_the_trained_policy(smollm2_dir, sequences, tmp_path):
    from training.rl.trainer import load_policy, recompute_logprobs

    trainer = _trainer(smollm2_dir, lr=1e-3)
    batch = _on_policy(trainer, sequences)
    trainer.train_step(batch)
    folder = trainer.save_adapter(tmp_path / "v1")
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 8, 16)
    assert set(config["target_modules"]) == {"q_proj", "v_proj"}
    assert (folder / "adapter_model.safetensors").is_file()
    reloaded = recompute_logprobs(load_policy(smollm2_dir, adapter_dir=folder), batch)
    for mine, theirs in zip(trainer.recompute_logprobs(batch), reloaded, strict=True):
        assert theirs == pytest.approx(mine, abs=1e-5)


def test_trainer_behaviour_logprobs_ignore_what_a_constrained_sampler_reported(
    smollm2_dir, sequences
):
    """Under json_schema decoding vLLM reports masked logprobs (forced tokens as 0.0); with
    behaviour_logprobs="trainer" the step is the on-policy one whatever they say, and the
    gap to them is still reported."""
    reported = [_shift(s, 0.0) for s in sequences]  # every sampled logprob "0.0", as forced
    sampler_side = _trainer(smollm2_dir, loss="cispo", lr=1e-6, cispo_eps_low=0.2)
    off = sampler_side.train_step(reported)
    trainer_side = _trainer(smollm2_dir, loss="cispo", lr=1e-6, cispo_eps_low=0.2,
                            behaviour_logprobs="trainer")  # fmt: skip
    reference = _trainer(smollm2_dir, loss="cispo", lr=1e-6, cispo_eps_low=0.2)
    on_policy = reference.train_step(_on_policy(reference, sequences))
    own = trainer_side.train_step(reported)
    # The ratio against the model's own logprobs is 1: nothing clipped, and the loss is the
    # on-policy one computed from the true logprobs.
    assert own.clip_low_frac == own.clip_high_frac == 0.0
    assert own.loss == pytest.approx(on_policy.loss, rel=1e-4)
    # Against the reported 0.0s, every token the model is not near-certain of has a ratio
    # below 1 - 0.2 and is clipped low: the signal a constrained rollout would lose.
    assert off.clip_low_frac > 0.8
    assert own.logprob_gap == pytest.approx(off.logprob_gap) and own.logprob_gap > 0.1


def test_an_unknown_behaviour_source_is_refused():
    from training.rl.trainer import TrainSettings

    with pytest.raises(ValueError, match="behaviour_logprobs 'vllm' is not one of"):
        TrainSettings(behaviour_logprobs="vllm")
