"""The built-in trainer step: a peft LoRA adapter on a causal LM, CISPO or GRPO.

One code path for the CPU (SmolLM2-135M in float32, what the tests and CI run) and a GPU
with a real model: only `device` and `dtype` change. Sequences go through the model one at
a time, with no padding: a padded batch would need attention masks and position ids that
the sampler never saw, and per-sequence passes keep the recomputed logprobs comparable to
the sampler's. The batch's sequences are split into `substeps` minibatches (contiguous, in
batch order); gradients accumulate over a minibatch and the optimiser steps once per
minibatch, so a batch takes `substeps` optimiser steps (Harness-1: 4). Sequences longer
than `max_sequence_tokens` (prompt plus response) are dropped, not truncated: cutting the
context would change the distribution the sampled tokens came from.

Only the positions that predict a sampled token are projected onto the vocabulary, a
chunk of positions at a time (training.rl.memory), so memory grows with the sampled
tokens, not with the tool results and prompts around them, and never holds a
[tokens × vocab] block at once. Activation checkpointing is a setting (on for CUDA).

The logprobs are of the raw distribution (temperature 1), which is what vLLM reports by
default; rollouts for RL are sampled at temperature 1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from training.rl import losses, memory
from training.rl.batches import TrainSequence

LOSSES = ("cispo", "grpo")
BEHAVIOUR_SOURCES = ("sampler", "trainer")
OPTIMIZER_FILE = "optimizer.pt"  # AdamW's state, saved beside the adapter


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    seed: int = 0  # the adapter's initial A matrices; B starts at zero either way

    def peft_config(self) -> LoraConfig:
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            task_type="CAUSAL_LM",
        )


@dataclass(frozen=True)
class TrainSettings:
    loss: str = "cispo"
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    cispo_eps_low: float = losses.CISPO_EPS_LOW
    cispo_eps_high: float = losses.CISPO_EPS_HIGH
    grpo_eps: float = losses.GRPO_EPS
    kl_beta: float = 0.0  # Harness-1's launch: losses.KL_BETA_HARNESS1 when the term is on
    # Whose logprobs the importance ratio divides by. "sampler": those vLLM reported.
    # "trainer": the trainer's own, before the update (ratio 1, pure on-policy), for
    # rollouts whose reported logprobs are not of the model's distribution: under
    # constrained decoding (response_format json_schema) vLLM reports the logprobs of the
    # grammar-masked, renormalised distribution (a forced token comes back as 0.0), which
    # the trainer cannot reproduce without the masks.
    behaviour_logprobs: str = "sampler"
    substeps: int = 1  # optimiser steps per batch, one per minibatch (Harness-1: 4)
    max_sequence_tokens: int | None = None  # longer sequences are dropped; None: no cap
    logprob_chunk: int = memory.LOGPROB_CHUNK  # 0: project every kept position at once
    gradient_checkpointing: bool | None = None  # None: on for CUDA, off on the CPU

    def __post_init__(self) -> None:
        if self.substeps < 1:
            raise ValueError(f"substeps must be >= 1, got {self.substeps}")
        if self.max_sequence_tokens is not None and self.max_sequence_tokens < 2:
            raise ValueError(f"max_sequence_tokens must be >= 2, got {self.max_sequence_tokens}")
        if self.logprob_chunk < 0:
            raise ValueError(f"logprob_chunk must be >= 0, got {self.logprob_chunk}")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; use one of {LOSSES}")
        if self.behaviour_logprobs not in BEHAVIOUR_SOURCES:
            raise ValueError(
                f"behaviour_logprobs {self.behaviour_logprobs!r} is not one of {BEHAVIOUR_SOURCES}"
            )
        if self.lr <= 0 or self.max_grad_norm <= 0:
            raise ValueError("lr and max_grad_norm must be positive")
        if self.kl_beta < 0:
            raise ValueError(f"kl_beta must be >= 0, got {self.kl_beta}")


@dataclass
class StepMetrics:
    """What one optimiser step did; logprob statistics are from before the update."""

    loss: float = 0.0
    policy_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0  # mean entropy of the distributions the sampled tokens came from
    logprob_gap: float = 0.0  # mean |logπ_trainer − logπ_rollout| over sampled tokens
    logprob_gap_max: float = 0.0
    tokens: int = 0  # sampled (trained) tokens
    context_tokens: int = 0  # every token forwarded, masked ones included
    sequences: int = 0
    substeps: int = 0  # optimiser steps taken (one per minibatch)
    over_cap_sequences: int = 0  # dropped for exceeding max_sequence_tokens
    over_cap_tokens: int = 0  # their sampled tokens, not trained
    clip_low_frac: float = 0.0
    clip_high_frac: float = 0.0
    grad_norm: float = 0.0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- model ---------------------------------------------------------------------------------


def load_policy(
    model_dir: str | Path,
    *,
    lora: LoraSettings | None = None,
    adapter_dir: str | Path | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> PeftModel:
    """The base model from a local folder with a trainable LoRA adapter: a fresh one, or
    `adapter_dir` to go on from a saved policy version."""
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    torch.nn.Module.to(base, device)  # the typed Module.to; transformers wraps its own
    if adapter_dir is not None:
        return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)
    settings = lora or LoraSettings()
    torch.manual_seed(settings.seed)
    model = get_peft_model(base, settings.peft_config())
    assert isinstance(model, PeftModel)
    return model


def make_optimizer(model: torch.nn.Module, settings: TrainSettings) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)


def save_adapter(model: PeftModel, out_dir: str | Path) -> Path:
    """A peft adapter folder (adapter_config.json, adapter_model.safetensors) that vLLM
    loads with POST /v1/load_lora_adapter."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    return path


# -- logprobs ------------------------------------------------------------------------------


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _targets(seq: TrainSequence) -> tuple[list[int], list[int]]:
    """Positions whose logits predict a sampled token, and those tokens."""
    offset = len(seq.prompt_ids)
    sampled = [offset + i for i, m in enumerate(seq.loss_mask) if m]
    ids = seq.input_ids
    # A sampled token at position 0 has no context to be predicted from.
    if sampled and sampled[0] == 0:
        raise ValueError(f"sequence {seq.sample_id}: a sampled token needs a prompt before it")
    return [p - 1 for p in sampled], [ids[p] for p in sampled]


def sampled_token_logprobs(
    model: torch.nn.Module, seq: TrainSequence, *, chunk: int = memory.LOGPROB_CHUNK
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(token) of each sampled token (with grad) and its distribution's entropy.

    `chunk` positions are projected onto the vocabulary at a time; 0 projects them all at
    once (the plain `logits_to_keep` pass, kept to check the chunked one against)."""
    device = _device_of(model)
    positions, tokens = _targets(seq)
    input_ids = torch.tensor([seq.input_ids], device=device)
    keep = torch.tensor(positions, device=device)
    targets = torch.tensor(tokens, device=device)
    if chunk:
        return memory.chunked_token_logprobs(model, input_ids, keep, targets, chunk=chunk)
    logits = model(input_ids=input_ids, logits_to_keep=keep, use_cache=False).logits[0]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    chosen = log_probs.gather(-1, targets[:, None])[:, 0]
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


def recompute_logprobs(
    model: torch.nn.Module,
    sequences: Sequence[TrainSequence],
    *,
    chunk: int = memory.LOGPROB_CHUNK,
) -> list[list[float]]:
    """The model's logprob of every sampled token, per sequence, without gradients."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return [sampled_token_logprobs(model, s, chunk=chunk)[0].tolist() for s in sequences]
    finally:
        model.train(was_training)


def _reference_logprobs(model: PeftModel, seq: TrainSequence, chunk: int) -> torch.Tensor:
    # The reference policy is the base model: the same weights with the adapter off.
    with torch.no_grad(), model.disable_adapter():
        return sampled_token_logprobs(model, seq, chunk=chunk)[0]


# -- the step ------------------------------------------------------------------------------


def _policy_loss(
    new: torch.Tensor, rollout: torch.Tensor, advantage: float, settings: TrainSettings, n: int
) -> losses.PolicyLoss:
    adv = torch.tensor(advantage, dtype=new.dtype, device=new.device)
    mask = torch.ones_like(new)  # `new` holds sampled tokens only
    if settings.loss == "cispo":
        return losses.cispo_loss(
            new,
            rollout,
            adv,
            mask,
            eps_low=settings.cispo_eps_low,
            eps_high=settings.cispo_eps_high,
            normalizer=n,
        )
    return losses.grpo_loss(new, rollout, adv, mask, eps=settings.grpo_eps, normalizer=n)


def _accumulate(
    model: PeftModel,
    seq: TrainSequence,
    settings: TrainSettings,
    n: tuple[int, int],
    m: StepMetrics,
    behaviour: list[float] | None = None,
) -> None:
    """Forward and backward one sequence, adding its share of its minibatch's loss.

    `n` is (the minibatch's sampled tokens, the batch's): the loss is normalised by the
    first, so every token of a minibatch weighs the same in its optimiser step; the
    metrics by the second, so they are means over the whole batch."""
    n_mb, n_all = n
    new, entropy = sampled_token_logprobs(model, seq, chunk=settings.logprob_chunk)
    rollout = torch.tensor(seq.sampled_logprobs(), dtype=new.dtype, device=new.device)
    if settings.behaviour_logprobs == "trainer":
        old = new.detach() if behaviour is None else torch.tensor(behaviour).to(new)
    else:
        old = rollout
    policy = _policy_loss(new, old, seq.advantage, settings, n_mb)
    loss = policy.loss
    share = n_mb / n_all
    if settings.kl_beta > 0:
        ref = _reference_logprobs(model, seq, settings.logprob_chunk)
        kl = losses.kl_k3(new, ref, torch.ones_like(new), normalizer=n_mb)
        loss = loss + settings.kl_beta * kl
        m.kl += float(kl.detach()) * share
    loss.backward()
    gap = (new.detach() - rollout).abs()
    m.policy_loss += float(policy.loss.detach()) * share
    m.loss += float(loss.detach()) * share
    m.entropy += float(entropy.sum()) / n_all
    m.logprob_gap += float(gap.sum()) / n_all
    m.logprob_gap_max = max(m.logprob_gap_max, float(gap.max()))
    m.clip_low_frac += policy.clipped_low / n_all
    m.clip_high_frac += policy.clipped_high / n_all
    m.context_tokens += len(seq.input_ids)


def minibatches(sequences: Sequence[TrainSequence], substeps: int) -> list[list[TrainSequence]]:
    """The sequences in `substeps` contiguous minibatches of near-equal count (fewer when
    there are fewer sequences); none is empty."""
    count = min(substeps, len(sequences))
    size, extra = divmod(len(sequences), count) if count else (0, 0)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(sequences[start:end]))
        start = end
    return out


def train_step(
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[TrainSequence],
    settings: TrainSettings,
) -> StepMetrics:
    """`settings.substeps` optimiser steps over the batch, one per minibatch.

    Logprob statistics (gap, entropy) of a later minibatch are taken after the earlier
    substeps' updates, as the loss sees them."""
    started = time.perf_counter()
    cap = settings.max_sequence_tokens
    with_tokens = [s for s in sequences if s.sampled_tokens]
    trainable = [s for s in with_tokens if cap is None or len(s.input_ids) <= cap]
    over = [s for s in with_tokens if cap is not None and len(s.input_ids) > cap]
    n = sum(s.sampled_tokens for s in trainable)
    metrics = StepMetrics(
        tokens=n,
        sequences=len(trainable),
        over_cap_sequences=len(over),
        over_cap_tokens=sum(s.sampled_tokens for s in over),
    )
    if n == 0:
        return metrics
    behaviour: dict[int, list[float]] = {}
    if settings.behaviour_logprobs == "trainer" and settings.substeps > 1:
        # Every minibatch's ratio divides by the policy before the batch's first substep.
        old = recompute_logprobs(model, trainable, chunk=settings.logprob_chunk)
        behaviour = {id(s): lp for s, lp in zip(trainable, old, strict=True)}
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    norms: list[float] = []
    for batch in minibatches(trainable, settings.substeps):
        n_mb = sum(s.sampled_tokens for s in batch)
        optimizer.zero_grad(set_to_none=True)
        for seq in batch:
            _accumulate(model, seq, settings, (n_mb, n), metrics, behaviour.get(id(seq)))
        norm = float(torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm))
        norms.append(norm)
        if math.isfinite(norm):
            optimizer.step()
            metrics.substeps += 1
        else:
            # A NaN/inf gradient would poison the adapter and AdamW's moments for good.
            metrics.extra["skipped"] = "non-finite gradient norm"
            break
    optimizer.zero_grad(set_to_none=True)
    metrics.grad_norm = norms[-1] if not math.isfinite(norms[-1]) else max(norms)
    if len(norms) > 1:
        metrics.extra["grad_norms"] = norms
    metrics.seconds = time.perf_counter() - started
    return metrics


class PolicyTrainer:
    """The model and its optimiser, kept together across steps (AdamW's moments matter)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        lora: LoraSettings | None = None,
        settings: TrainSettings | None = None,
        adapter_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.settings = settings or TrainSettings()
        self.model = load_policy(
            model_dir, lora=lora, adapter_dir=adapter_dir, device=device, dtype=dtype
        )
        checkpointing = self.settings.gradient_checkpointing
        if checkpointing is None:
            checkpointing = memory.default_gradient_checkpointing(device)
        memory.set_gradient_checkpointing(self.model, checkpointing)
        self.optimizer = make_optimizer(self.model, self.settings)

    def recompute_logprobs(self, sequences: Sequence[TrainSequence]) -> list[list[float]]:
        return recompute_logprobs(self.model, sequences, chunk=self.settings.logprob_chunk)

    def train_step(self, sequences: Sequence[TrainSequence]) -> StepMetrics:
        return train_step(self.model, self.optimizer, sequences, self.settings)

    def save_adapter(self, out_dir: str | Path) -> Path:
        return save_adapter(self.model, out_dir)

    def save(self, out_dir: str | Path) -> Path:
        """The adapter plus AdamW's state beside it, so a later process can go on from this
        version exactly as if the trainer had stayed in memory."""
        path = self.save_adapter(out_dir)
        torch.save(self.optimizer.state_dict(), path / OPTIMIZER_FILE)
        return path

    def restore_optimizer(self, adapter_dir: str | Path) -> bool:
        """Load the optimiser state saved with the adapter; False when there is none."""
        state_path = Path(adapter_dir) / OPTIMIZER_FILE
        if not state_path.is_file():
            return False
        state = torch.load(state_path, map_location=_device_of(self.model), weights_only=True)
        self.optimizer.load_state_dict(state)
        return True
