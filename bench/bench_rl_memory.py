"""Trainer tokens/s and peak memory per sequence length: one RL trainer step (CISPO, LoRA)
on one synthetic sequence, each length in a fresh process.

Prints a table, asserts nothing. Run from the project root:

    .venv/bin/python bench/bench_rl_memory.py [--lengths 512 2048] [--checkpointing both]
        [--model .llm/smollm2-135m-instruct] [--device cuda] [--rank 32 --targets all]

A sequence of N tokens is a prompt of 3N/4 tokens and a response of N/4 sampled tokens
(random ids: speed and memory do not depend on which tokens). tokens/s counts every
context token forwarded (the figure the Harness-1 issue quotes), sampled/s the trained ones.

Memory, honestly:
- CUDA: torch.cuda.max_memory_allocated over the step (tensors only; the caching
  allocator's reserve and the CUDA context come on top).
- CPU: the process's peak resident set (getrusage ru_maxrss) after the step minus before
  it. The weights are loaded before, so this is what the step added above everything the
  process had touched; it includes allocator slack and counts freed-and-reused pages once.
  tracemalloc would miss it: torch allocates outside Python's allocator.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(args: argparse.Namespace) -> dict[str, object]:
    """One step in this process; the figures as a dict."""
    import torch

    from training.rl.batches import TrainSequence
    from training.rl.trainer import LoraSettings, PolicyTrainer, TrainSettings

    targets = ALL_LINEAR if args.targets == "all" else tuple(args.targets.split(","))
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    trainer = PolicyTrainer(
        args.model,
        lora=LoraSettings(rank=args.rank, alpha=2 * args.rank, target_modules=targets),
        settings=TrainSettings(
            gradient_checkpointing=args.one_checkpointing, logprob_chunk=args.chunk
        ),
        device=args.device,
        dtype=dtype,
    )
    params = sum(p.numel() for p in trainer.model.parameters())
    rng = random.Random(0)

    def sequence(n: int) -> TrainSequence:
        sampled = n // 4
        ids = [rng.randrange(300, 40000) for _ in range(n)]
        return TrainSequence(
            sample_id="0-0", group_id=0, episode_id=0, segment_idx=0, policy_version="v0",
            prompt_ids=ids[: n - sampled], response_ids=ids[n - sampled :],
            loss_mask=[1] * sampled, rollout_logprobs=[-10.0] * sampled, reward=1.0,
            advantage=1.0, termination_reason="end_search",
        )  # fmt: skip

    # A short warm-up step pages the (memory-mapped) weights in and creates AdamW's
    # state, so neither is counted as the measured step's.
    trainer.train_step([sequence(64)])
    seq = sequence(args.one_length)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.max_memory_allocated() / 2**20
    else:
        before = _rss_mib()
    started = time.perf_counter()
    metrics = trainer.train_step([seq])
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = (torch.cuda.max_memory_allocated() / 2**20) if cuda else _rss_mib()
    return {
        "params_m": round(params / 1e6, 1),
        "length": args.one_length,
        "checkpointing": args.one_checkpointing,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(metrics.context_tokens / seconds, 1),
        "sampled_per_s": round(metrics.tokens / seconds, 1),
        "peak_mib": round(peak, 1),
        "step_mib": round(peak - before, 1),
        "memory": "cuda max_memory_allocated" if cuda else "ru_maxrss delta",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / ".llm" / "smollm2-135m-instruct"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--checkpointing", choices=["on", "off", "both"], default="both")
    parser.add_argument("--chunk", type=int, default=1024, help="logprob chunk; 0: unchunked")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--targets", default="q_proj,v_proj", help='comma list, or "all"')
    parser.add_argument("--one-length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-checkpointing", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_length is not None:
        args.one_checkpointing = bool(args.one_checkpointing)
        print(json.dumps(measure(args)))
        return
    modes = {"on": [1], "off": [0], "both": [0, 1]}[args.checkpointing]
    print(f"model {args.model}, device {args.device}, LoRA rank {args.rank} on {args.targets}")
    print("params(M) length ckpt seconds tokens/s sampled/s peak(MiB) step(MiB) memory")
    for length in args.lengths:
        for mode in modes:
            command = [
                sys.executable, __file__, "--model", args.model, "--device", args.device,
                "--chunk", str(args.chunk), "--rank", str(args.rank), "--targets", args.targets,
                "--one-length", str(length), "--one-checkpointing", str(mode),
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or ["?"]
                print(f"-- length {length} ckpt {bool(mode)}: failed: {tail[0]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{r['params_m']:>9} {r['length']:>6} {'on ' if r['checkpointing'] else 'off'}"
                f" {r['seconds']:>7} {r['tokens_per_s']:>8} {r['sampled_per_s']:>9}"
                f" {r['peak_mib']:>9} {r['step_mib']:>9} {r['memory']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
