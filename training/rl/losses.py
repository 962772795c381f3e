"""Token-level policy-gradient losses: CISPO (Harness-1's choice) and GRPO, plus a k3 KL.

All functions take per-token tensors of one shape (any shape; [batch, tokens] in practice):
`new_logprobs` (with grad) from the trainer, `rollout_logprobs` as the sampler reported
them, `mask` 1 on sampled tokens, and `advantages` broadcastable to them (one value per
sequence, expanded). Losses are summed over the sampled tokens and divided by their count
(`normalizer`; pass the batch's total when a batch is split into micro-batches, so every
token weighs the same whatever micro-batch it falls in).

CISPO (MiniMax-M1) clips the importance-sampling *weight* and stops its gradient, instead
of clipping the objective like PPO/GRPO: every sampled token keeps a gradient, including
the rare, high-ratio tokens PPO would zero, which is what makes it stable on long
tool-using trajectories. Harness-1 clips the weight to [0, 5]: eps_low = 1, eps_high = 4.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CISPO_EPS_LOW = 1.0
CISPO_EPS_HIGH = 4.0
GRPO_EPS = 0.2
KL_BETA_HARNESS1 = 0.005  # what Harness-1's RL launch uses when the KL term is on


@dataclass(frozen=True)
class PolicyLoss:
    """The loss to backpropagate and the clipping statistics over the sampled tokens.

    `clipped_low`/`clipped_high` are token counts (not fractions), so micro-batches add up.
    """

    loss: torch.Tensor
    clipped_low: int
    clipped_high: int


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum()


def _denominator(mask: torch.Tensor, normalizer: float | None) -> float:
    count = float(mask.sum()) if normalizer is None else float(normalizer)
    # A batch with no sampled token contributes nothing; avoid 0/0.
    return max(count, 1.0)


def importance_ratio(new_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor) -> torch.Tensor:
    """π_new(token) / π_rollout(token), from logprobs."""
    return torch.exp(new_logprobs - rollout_logprobs)


def cispo_loss(
    new_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = CISPO_EPS_LOW,
    eps_high: float = CISPO_EPS_HIGH,
    normalizer: float | None = None,
) -> PolicyLoss:
    """−Σ sg(clip(ratio, 1−eps_low, 1+eps_high)) · A · log π_new, over sampled tokens."""
    mask = mask.to(new_logprobs.dtype)
    ratio = importance_ratio(new_logprobs.detach(), rollout_logprobs)
    weight = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_token = -weight * advantages * new_logprobs
    loss = _masked_sum(per_token, mask) / _denominator(mask, normalizer)
    low = int(_masked_sum((ratio < 1.0 - eps_low).to(mask.dtype), mask))
    high = int(_masked_sum((ratio > 1.0 + eps_high).to(mask.dtype), mask))
    return PolicyLoss(loss, low, high)


def grpo_loss(
    new_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps: float = GRPO_EPS,
    normalizer: float | None = None,
) -> PolicyLoss:
    """PPO's clipped surrogate per token: −min(ratio·A, clip(ratio, 1−eps, 1+eps)·A).

    A token is counted as clipped where the clipped branch wins and so has no gradient:
    low for A < 0 with ratio < 1−eps, high for A > 0 with ratio > 1+eps.
    """
    mask = mask.to(new_logprobs.dtype)
    ratio = importance_ratio(new_logprobs, rollout_logprobs)
    advantages = advantages.expand_as(ratio)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - eps, 1.0 + eps) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    loss = _masked_sum(per_token, mask) / _denominator(mask, normalizer)
    r = ratio.detach()
    low = int(_masked_sum(((advantages < 0) & (r < 1.0 - eps)).to(mask.dtype), mask))
    high = int(_masked_sum(((advantages > 0) & (r > 1.0 + eps)).to(mask.dtype), mask))
    return PolicyLoss(loss, low, high)


def kl_k3(
    new_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Schulman's k3 estimate of KL(π_new ‖ π_ref) on the sampled tokens, averaged.

    exp(ref − new) − (ref − new) − 1 is never negative and, for tokens drawn from the policy,
    unbiased with far less variance than the plain log ratio.
    """
    mask = mask.to(new_logprobs.dtype)
    delta = ref_logprobs - new_logprobs
    per_token = torch.exp(delta) - delta - 1.0
    return _masked_sum(per_token, mask) / _denominator(mask, normalizer)
