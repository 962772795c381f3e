"""SFT trainer tokens/s and peak memory per record length: the SFT job's own trainer
(training/sft/train.py, TRL's SFTTrainer with a LoRA adapter) on synthetic token records,
each length in a fresh process.

Prints a table, asserts nothing. Run from the project root:

    .venv/bin/python bench/bench_sft.py [--lengths 256 1024 2048] [--records 8]
        [--model .llm/smollm2-135m-instruct] [--device cuda] [--rank 32 --targets all]

A record of N tokens trains its last N/4 (the assistant's share of a typical trajectory;
random ids: speed does not depend on which tokens). tokens/s counts every token
forwarded, as TRL's `num_input_tokens_seen` does, over `--records` records × 1 epoch,
after a one-record warm-up run that loads and pages in the weights. Memory: on CUDA
torch.cuda.max_memory_allocated; on the CPU the process's peak resident set (ru_maxrss),
which includes the weights (bench_rl_memory.py explains why not tracemalloc).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _records(path: Path, count: int, length: int, seed: int) -> Path:
    rng = random.Random(seed)
    with path.open("w") as fh:
        for _ in range(count):
            ids = [rng.randrange(300, 40000) for _ in range(length)]
            cut = length - length // 4
            fh.write(json.dumps({"input_ids": ids, "labels": [-100] * cut + ids[cut:]}) + "\n")
    return path


def measure(args: argparse.Namespace) -> dict[str, object]:
    import torch

    from training.sft.train import LORA_TARGETS_ALL_LINEAR, SFTSettings, sft_train

    targets = LORA_TARGETS_ALL_LINEAR if args.targets == "all" else tuple(args.targets.split(","))
    settings = SFTSettings(
        lora_rank=args.rank,
        lora_alpha=2 * args.rank,
        lora_targets=targets,
        epochs=1.0,
        max_length=args.one_length,
        eval_fraction=0.0,
        save_steps=10_000,
        gradient_checkpointing=bool(args.one_checkpointing),
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        warm = _records(folder / "warm.jsonl", 1, 64, seed=1)
        sft_train(
            model_dir=args.model, export_path=warm, output_dir=folder / "w", settings=settings,
            device=args.device,
        )  # fmt: skip
        data = _records(folder / "data.jsonl", args.records, args.one_length, seed=2)
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        result = sft_train(
            model_dir=args.model, export_path=data, output_dir=folder / "r", settings=settings,
            device=args.device,
        )  # fmt: skip
    cuda = args.device.startswith("cuda")
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if cuda
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    m = result.metrics
    return {
        "length": args.one_length,
        "checkpointing": bool(args.one_checkpointing),
        "steps": m["steps"],
        "seconds": round(m["train_seconds"], 2),
        "tokens_per_s": round(m["tokens_per_s"], 1),
        "trained_per_s": round(result.manifest["train_target_tokens"] / m["train_seconds"], 1),
        "peak_mib": round(peak, 1),
        "memory": "cuda max_memory_allocated" if cuda else "ru_maxrss (whole process)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / ".llm" / "smollm2-135m-instruct"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--records", type=int, default=8)
    parser.add_argument("--checkpointing", choices=["on", "off", "both"], default="off")
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--targets", default="all", help='comma list, or "all"')
    parser.add_argument("--one-length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-checkpointing", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_length is not None:
        print(json.dumps(measure(args)))
        return
    modes = {"on": [1], "off": [0], "both": [0, 1]}[args.checkpointing]
    print(
        f"model {args.model}, device {args.device}, LoRA rank {args.rank} on {args.targets}, "
        f"{args.records} records x 1 epoch"
    )
    print("length ckpt steps seconds tokens/s trained/s peak(MiB) memory")
    for length in args.lengths:
        for mode in modes:
            command = [
                sys.executable, __file__, "--model", args.model, "--device", args.device,
                "--records", str(args.records), "--rank", str(args.rank),
                "--targets", args.targets, "--one-length", str(length),
                "--one-checkpointing", str(mode),
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or ["?"]
                print(f"-- length {length} ckpt {bool(mode)}: failed: {tail[0]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{r['length']:>6} {'on ' if r['checkpointing'] else 'off'} {r['steps']:>5}"
                f" {r['seconds']:>7} {r['tokens_per_s']:>8} {r['trained_per_s']:>9}"
                f" {r['peak_mib']:>9} {r['memory']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
