"""Memory for long sequences: activation checkpointing and a chunked logprob pass.

Two costs grow with a sequence's length in the trainer step. The decoder's activations,
kept for the backward pass, are the first: activation (gradient) checkpointing keeps only
each layer's input and recomputes the rest during backward, trading about a third more
compute for memory that no longer grows with depth. The second is the projection onto the
vocabulary: SmolLM2's 49k-token and Qwen2.5's 152k-token vocabularies make a float32
[tokens × vocab] block of gigabytes at 8k tokens. `chunked_token_logprobs` projects a
chunk of positions at a time and checkpoints each chunk, so neither the forward nor the
saved-for-backward state ever holds more than one chunk's [chunk × vocab] block.

Both leave the loss and the gradients unchanged up to float rounding (tests/training_rl
compares them). Neither imports Django; the SFT job can call `set_gradient_checkpointing`
on its model the same way.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

LOGPROB_CHUNK = 1024  # positions projected onto the vocabulary at once


def default_gradient_checkpointing(device: str | torch.device) -> bool:
    """On for CUDA (long contexts, where activations are what runs out), off on the CPU
    (short test sequences, where the recompute only costs time)."""
    return torch.device(device).type == "cuda"


def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    get_base = getattr(model, "get_base_model", None)  # a peft PeftModel
    return get_base() if callable(get_base) else model


def set_gradient_checkpointing(model: torch.nn.Module, enabled: bool) -> None:
    """Switch activation checkpointing of a transformers causal LM (or a peft model on one)
    on or off. Non-reentrant checkpointing needs no input that requires grad, so it works
    with a frozen base and a LoRA adapter."""
    base: Any = _base_model(model)
    # transformers 5 renamed gradient_ to activation_checkpointing_*; keep both working.
    new_api = hasattr(base, "activation_checkpointing_enable")
    if enabled:
        kwargs = {"use_reentrant": False}
        if new_api:
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        base.config.use_cache = False
    elif new_api:
        base.activation_checkpointing_disable()
    else:
        base.gradient_checkpointing_disable()


def gradient_checkpointing_on(model: torch.nn.Module) -> bool:
    base: Any = _base_model(model)
    flag = getattr(base, "is_activation_checkpointing", None)
    if flag is None:
        flag = getattr(base, "is_gradient_checkpointing", False)
    return bool(flag)


def _chunk_logprobs(
    lm_head: torch.nn.Module, hidden: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # float32 for the softmax whatever the model's dtype: bf16 logprobs are too coarse
    # for importance ratios.
    log_probs = torch.log_softmax(lm_head(hidden).float(), dim=-1)
    chosen = log_probs.gather(-1, tokens[:, None])[:, 0]
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


def chunked_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    tokens: torch.Tensor,
    *,
    chunk: int = LOGPROB_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(tokens[i] | input_ids[:positions[i] + 1]) and the entropy there, for one
    sequence (`input_ids` [1, T]); the vocabulary is projected `chunk` positions at a time.
    """
    if chunk < 1:
        raise ValueError(f"logprob chunk must be >= 1, got {chunk}")
    base: Any = _base_model(model)
    decoder = base.get_decoder()
    lm_head = base.get_output_embeddings()
    hidden = decoder(input_ids=input_ids, use_cache=False).last_hidden_state[0]
    kept = hidden.index_select(0, positions)
    chosen, entropy = [], []
    for start in range(0, len(positions), chunk):
        h, t = kept[start : start + chunk], tokens[start : start + chunk]
        if torch.is_grad_enabled():
            # Recompute the chunk's logits in backward instead of saving its log_softmax.
            c, e = checkpoint(_chunk_logprobs, lm_head, h, t, use_reentrant=False)
        else:
            c, e = _chunk_logprobs(lm_head, h, t)
        chosen.append(c)
        entropy.append(e)
    return torch.cat(chosen), torch.cat(entropy)
