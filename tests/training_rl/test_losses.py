"""CISPO, GRPO and the k3 KL on tiny tensors, against hand-computed values and gradients."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the RL losses need torch (the 'train' extra)")
from training.rl.losses import cispo_loss, grpo_loss, kl_k3  # noqa: E402


def _logprobs(new, ratios):
    """New logprobs (with grad) and rollout logprobs giving exactly these ratios."""
    new_t = torch.tensor(new, dtype=torch.float64, requires_grad=True)
    rollout = torch.tensor([n - math.log(r) for n, r in zip(new, ratios, strict=True)])
    return new_t, rollout.to(torch.float64)


NEW = [-1.0, -2.0, -0.5, -3.0]
MASK = torch.tensor([1.0, 1.0, 1.0, 0.0])  # the last token is a tool result


def test_cispo_clips_the_weight_to_0_5_and_stops_its_gradient():
    new, rollout = _logprobs(NEW, [0.5, 1.0, 6.0, 9.0])
    out = cispo_loss(new, rollout, torch.tensor(1.0, dtype=torch.float64), MASK)
    # Weights 0.5, 1, min(6, 5) = 5; token 4 masked. Loss = -(0.5·-1 + 1·-2 + 5·-0.5) / 3.
    assert out.loss.item() == pytest.approx(5 / 3)
    out.loss.backward()
    # d/dnew = -weight·A/3: the weight is a constant (stop-gradient), masked token gets 0.
    assert new.grad.tolist() == pytest.approx([-0.5 / 3, -1 / 3, -5 / 3, 0.0])
    assert (out.clipped_low, out.clipped_high) == (0, 1)


def test_cispo_lower_bound_and_negative_advantage_flip_the_push():
    new, rollout = _logprobs(NEW, [0.5, 1.0, 6.0, 0.1])
    out = cispo_loss(
        new, rollout, torch.tensor(-2.0, dtype=torch.float64), MASK, eps_low=0.2, eps_high=4.0
    )
    # Weights max(0.5, 0.8) = 0.8, 1, 5. Loss = +2·(0.8·-1 + 1·-2 + 5·-0.5) / 3.
    assert out.loss.item() == pytest.approx(2 * (-0.8 - 2 - 2.5) / 3)
    out.loss.backward()
    assert new.grad.tolist() == pytest.approx([1.6 / 3, 2 / 3, 10 / 3, 0.0])
    # The masked token's ratio 0.1 would clip too, but masked tokens are not counted.
    assert (out.clipped_low, out.clipped_high) == (1, 1)


def test_grpo_positive_advantage_loses_the_gradient_above_1_plus_eps():
    new, rollout = _logprobs(NEW[:3], [0.5, 1.1, 1.5])
    out = grpo_loss(new, rollout, torch.tensor(1.0, dtype=torch.float64), torch.ones(3))
    # min(r·A, clip(r)·A) = min(0.5, 0.8), min(1.1, 1.1), min(1.5, 1.2) = 0.5, 1.1, 1.2.
    assert out.loss.item() == pytest.approx(-(0.5 + 1.1 + 1.2) / 3)
    out.loss.backward()
    # d(ratio)/d(new) = ratio; the clipped third token has none.
    assert new.grad.tolist() == pytest.approx([-0.5 / 3, -1.1 / 3, 0.0])
    assert (out.clipped_low, out.clipped_high) == (0, 1)


def test_grpo_negative_advantage_loses_the_gradient_below_1_minus_eps():
    new, rollout = _logprobs(NEW[:3], [0.5, 1.1, 1.5])
    out = grpo_loss(new, rollout, torch.tensor(-1.0, dtype=torch.float64), torch.ones(3))
    # min(-0.5, -0.8), min(-1.1, -1.1), min(-1.5, -1.2) = -0.8, -1.1, -1.5.
    assert out.loss.item() == pytest.approx((0.8 + 1.1 + 1.5) / 3)
    out.loss.backward()
    assert new.grad.tolist() == pytest.approx([0.0, 1.1 / 3, 1.5 / 3])
    assert (out.clipped_low, out.clipped_high) == (1, 0)


def test_a_batch_normaliser_replaces_the_local_token_count():
    new, rollout = _logprobs(NEW, [1.0, 1.0, 1.0, 1.0])
    adv = torch.tensor(1.0, dtype=torch.float64)
    local = cispo_loss(new, rollout, adv, MASK).loss.item()
    batch = cispo_loss(new, rollout, adv, MASK, normalizer=6).loss.item()
    # -(−1 − 2 − 0.5) / 3 on its own; the same sum over 6 tokens of a larger batch.
    assert local == pytest.approx(3.5 / 3)
    assert batch == pytest.approx(3.5 / 6)


def test_per_sequence_advantages_broadcast_over_tokens():
    new = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[1.0], [-1.0]])
    out = cispo_loss(new, new.detach(), adv, torch.ones(2, 2))
    assert out.loss.item() == pytest.approx(0.0)  # equal and opposite sequences cancel
    out.loss.backward()
    assert new.grad.tolist() == [[-0.25, -0.25], [0.25, 0.25]]


def test_k3_kl_is_zero_at_the_reference_and_positive_away_from_it():
    new = torch.tensor([-1.0, -2.0, -4.0])
    ref = torch.tensor([-1.0, -1.0, -9.0])
    mask = torch.tensor([1.0, 1.0, 0.0])
    # delta = ref − new = 0, 1 → e^0 − 0 − 1 = 0, e − 1 − 1; averaged over 2 tokens.
    assert kl_k3(new, ref, mask).item() == pytest.approx((math.e - 2) / 2)
    assert kl_k3(new, new, mask).item() == 0.0


def test_no_sampled_token_gives_a_zero_loss_not_nan():
    new, rollout = _logprobs([-1.0], [1.0])
    out = grpo_loss(new, rollout, torch.tensor(1.0, dtype=torch.float64), torch.zeros(1))
    assert out.loss.item() == 0.0
