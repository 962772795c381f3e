"""The trainer's long-sequence and recipe settings on the real SmolLM2-135M (CPU, float32):
activation checkpointing and the chunked logprob pass change no number, substeps take one
optimiser step per minibatch, and the per-sequence cap drops what it cannot train."""

from __future__ import annotations

import pytest

from tests.training_rl.test_trainer import _sequence

torch = pytest.importorskip("torch", reason="the trainer needs torch (the 'train' extra)")


@pytest.fixture
def sequences(tokenizer):
    return [
        _sequence(tokenizer, 0, "Capital of France?", ["Searching.", "It is Paris."], 1.0),
        _sequence(tokenizer, 1, "Capital of France?", ["Bananas!", "Green trucks hum."], -1.0),
        _sequence(tokenizer, 2, "Name a prime.", ["Seven is prime."], 1.0),
        _sequence(tokenizer, 3, "Name a prime.", ["Purple elephants sing."], -1.0),
    ]


def _trainer(smollm2_dir, *, lora=None, **settings):
    from training.rl.trainer import LoraSettings, PolicyTrainer, TrainSettings

    lora = lora or LoraSettings(rank=4, target_modules=("q_proj", "v_proj", "o_proj"))
    return PolicyTrainer(smollm2_dir, lora=lora, settings=TrainSettings(**settings))


def _nudge_adapter(model):
    """LoRA's B starts at zero, which leaves A's gradient zero; give B values so every
    adapter weight has a gradient to compare."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.normal_(0.0, 0.02)


def _loss_and_grads(trainer, seq):
    from training.rl.trainer import sampled_token_logprobs

    trainer.model.train()
    trainer.model.zero_grad(set_to_none=True)
    new, _ = sampled_token_logprobs(trainer.model, seq, chunk=trainer.settings.logprob_chunk)
    loss = -(new * seq.advantage).mean()
    loss.backward()
    grads = {
        n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad
    }
    return new.detach(), float(loss), grads


def _assert_same(a, b):
    (lp_a, loss_a, grads_a), (lp_b, loss_b, grads_b) = a, b
    torch.testing.assert_close(lp_a, lp_b, rtol=1e-4, atol=1e-5)
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-6)
    assert grads_a.keys() == grads_b.keys()
    assert any(g.abs().sum() > 0 for g in grads_a.values())
    for name, g in grads_a.items():
        # float32 sums in another order: relative to the tensor's size, not per element
        error = float((g - grads_b[name]).norm() / g.norm().clamp_min(1e-12))
        assert error < 1e-3, f"{name}: relative gradient difference {error:.2e}"


def test_activation_checkpointing_leaves_loss_and_gradients_unchanged(smollm2_dir, sequences):
    from training.rl import memory

    plain = _trainer(smollm2_dir, gradient_checkpointing=False)
    checked = _trainer(smollm2_dir, gradient_checkpointing=True)
    assert not memory.gradient_checkpointing_on(plain.model)
    assert memory.gradient_checkpointing_on(checked.model)
    _nudge_adapter(plain.model)
    _nudge_adapter(checked.model)
    _assert_same(_loss_and_grads(plain, sequences[0]), _loss_and_grads(checked, sequences[0]))


def test_checkpointing_defaults_on_for_cuda_and_off_on_the_cpu(smollm2_dir):
    from training.rl import memory

    assert memory.default_gradient_checkpointing("cuda")
    assert memory.default_gradient_checkpointing("cuda:1")
    assert not memory.default_gradient_checkpointing("cpu")
    assert not memory.gradient_checkpointing_on(_trainer(smollm2_dir).model)


def test_chunked_logprobs_and_gradients_match_the_single_pass(smollm2_dir, sequences):
    seq = sequences[1]  # two replies: more sampled positions than the chunk
    assert seq.sampled_tokens > 3
    whole = _trainer(smollm2_dir, logprob_chunk=0)
    chunked = _trainer(smollm2_dir, logprob_chunk=3)
    _nudge_adapter(whole.model)
    _nudge_adapter(chunked.model)
    _assert_same(_loss_and_grads(whole, seq), _loss_and_grads(chunked, seq))


def test_substeps_take_one_optimiser_step_per_minibatch(smollm2_dir, sequences):
    trainer = _trainer(smollm2_dir, substeps=2, lr=1e-3)
    metrics = trainer.train_step(sequences)
    assert metrics.substeps == 2
    assert len(metrics.extra["grad_norms"]) == 2
    steps = {int(s["step"]) for s in trainer.optimizer.state.values()}
    assert steps == {2}  # AdamW stepped twice
    assert metrics.tokens == sum(s.sampled_tokens for s in sequences)

    more = _trainer(smollm2_dir, substeps=10)  # more substeps than sequences: one each
    assert more.train_step(sequences).substeps == len(sequences)


def test_minibatches_split_the_batch_in_order_without_empty_ones(sequences):
    from training.rl.trainer import minibatches

    parts = minibatches(sequences[:3], 2)
    assert [[s.sample_id for s in p] for p in parts] == [["0-0", "1-0"], ["2-0"]]
    assert minibatches([], 4) == []


def test_sequences_over_the_token_cap_are_dropped_and_counted(smollm2_dir, sequences):
    lengths = [len(s.input_ids) for s in sequences]
    cap = sorted(lengths)[1]  # keeps the two shortest (ties aside)
    over = [s for s in sequences if len(s.input_ids) > cap]
    assert over
    metrics = _trainer(smollm2_dir, max_sequence_tokens=cap).train_step(sequences)
    assert metrics.over_cap_sequences == len(over)
    assert metrics.over_cap_tokens == sum(s.sampled_tokens for s in over)
    assert metrics.sequences == len(sequences) - len(over)
    assert metrics.context_tokens == sum(n for n in lengths if n <= cap)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("substeps", 0), ("max_sequence_tokens", 1), ("logprob_chunk", -1)],
)
def test_bad_trainer_settings_name_the_setting(setting, value):
    from training.rl.trainer import TrainSettings

    with pytest.raises(ValueError, match=setting):
        TrainSettings(**{setting: value})
