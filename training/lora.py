"""LoRA shapes shared by the SFT and RL trainers and their job settings (no torch, no
Django: the web process, the trainers and the benches all import this)."""

from __future__ import annotations

MAX_LORA_RANK = 64  # the largest rank docs/operations.md starts vLLM for (LLM_MAX_LORA_RANK)
LORA_TARGETS_DEFAULT = ("q_proj", "v_proj")
LORA_TARGETS_ALL_LINEAR = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)  # fmt: skip


def lora_rank_default(rank: int, *, server_max: int) -> int:
    """`rank` (a recipe's, e.g. Harness-1's 32 for SFT), or less when the vLLM server that
    is to serve the adapter loads no larger one (its --max-lora-rank): an adapter above it
    is refused at publish, after the whole training."""
    return max(1, min(rank, server_max))
