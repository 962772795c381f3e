"""Seconds per phase of an RL step with the built-in trainer, on the CPU.

Prints figures, asserts nothing. Run from the project root:

    .venv/bin/python bench/bench_rl.py [--steps 2] [--vllm http://127.0.0.1:8011/v1]

Without --vllm the batch is synthetic (random token ids in the shape of a multi-turn
episode: prompt, sampled replies, masked tool results between them) and the phases are
build (advantages + sequences), recompute (trainer logprobs, no gradient), train (one
optimiser step) and save (the adapter folder).

With --vllm it runs the RL loop in miniature against the server: rollout (groups of
token-in multi-turn samples from the current policy, in parallel), build, train, save, and
publish (POST /v1/load_lora_adapter), so the next step samples from the new adapter. The
logprob gap printed is the trainer's against the sampler's, before the update. Rewards
are random (seeded): this measures the machinery, not learning.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness_app.harness.llm.client import ChatClient, Sampling  # noqa: E402
from harness_app.harness.llm.reconstruct import CallTokens  # noqa: E402
from training.rl.batches import EpisodeCalls, batch_build  # noqa: E402
from training.rl.publish import adapter_load, adapter_unload  # noqa: E402
from training.rl.trainer import PolicyTrainer, TrainSettings  # noqa: E402

QUESTIONS = [
    "Which country is the Eiffel Tower in, and who designed it?",
    "Who wrote Pride and Prejudice, and when was it published?",
    "What is the boiling point of water at sea level in Fahrenheit?",
    "Which planet has the most moons?",
]
IM_END, NEWLINE = 2, 198  # SmolLM2's <|im_end|> and "\n"


def synthetic_episode(
    rng: random.Random, episode_id: int, args: argparse.Namespace
) -> EpisodeCalls:
    vocab = range(300, 40000)
    tokens = [rng.choice(vocab) for _ in range(args.prompt_tokens)]
    calls = []
    for turn in range(args.turns):
        completion = [rng.choice(vocab) for _ in range(args.max_tokens)]
        calls.append(CallTokens(turn, list(tokens), completion, [-1.0] * len(completion)))
        tool_result = [rng.choice(vocab) for _ in range(args.tool_tokens)]
        tokens = tokens + completion + tool_result
    return EpisodeCalls(
        episode_id, episode_id // args.group_size, rng.random(), "end_search", calls
    )


def _tool_turn(client: ChatClient, turn: int) -> list[int]:
    """The template's tokens for a tool-result turn and the next assistant header: the
    tail a render gains when the turn is appended after an assistant reply."""
    before = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    result = {"role": "user", "content": f"result {turn}: three documents found."}
    head = client.tokenize_chat(before, add_generation_prompt=False)
    full = client.tokenize_chat([*before, result])
    assert full[: len(head)] == head, "the template re-renders earlier turns"
    return full[len(head) :]


def rollout_episode(
    client: ChatClient, question: str, episode_id: int, args: argparse.Namespace, seed: int
) -> EpisodeCalls:
    """Token-in turns, each prompt the exact previous prompt + completion + a tool turn."""
    prompt = client.tokenize_chat([{"role": "user", "content": question}])
    calls = []
    for turn in range(args.turns):
        sampling = Sampling(temperature=1.0, max_tokens=args.max_tokens, seed=seed * 100 + turn)
        record = client.complete(client.build_completion_request(prompt, sampling))
        calls.append(
            CallTokens(
                turn,
                record.prompt_token_ids,
                record.completion_token_ids,
                record.completion_logprobs,
                client.model,
            )
        )
        closing = [] if record.completion_token_ids[-1] == IM_END else [IM_END]
        prompt = [*record.prompt_token_ids, *record.completion_token_ids, *closing, NEWLINE]
        prompt += _tool_turn(client, turn)
    reward = random.Random(seed).random()
    return EpisodeCalls(episode_id, episode_id // args.group_size, reward, "end_search", calls)


def rollouts(url: str, model: str, args: argparse.Namespace, step: int) -> list[EpisodeCalls]:
    client = ChatClient(url, model, timeout_s=600)
    jobs = [
        (QUESTIONS[g % len(QUESTIONS)], g * args.group_size + i)
        for g in range(args.groups)
        for i in range(args.group_size)
    ]
    try:
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            futures = [
                pool.submit(rollout_episode, client, q, e, args, seed=step * 1000 + e)
                for q, e in jobs
            ]
            return [f.result() for f in futures]
    finally:
        client.close()


def run_step(
    trainer: PolicyTrainer, args: argparse.Namespace, step: int, model: str, out: Path
) -> tuple[dict[str, float], dict[str, float], str]:
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    if args.vllm:
        episodes = rollouts(args.vllm, model, args, step)
        seconds["rollout"] = time.perf_counter() - clock
    else:
        rng = random.Random(step)
        episodes = [synthetic_episode(rng, e, args) for e in range(args.groups * args.group_size)]
    clock = time.perf_counter()
    build = batch_build(episodes)
    seconds["build"] = time.perf_counter() - clock
    if not args.vllm:
        clock = time.perf_counter()
        trainer.recompute_logprobs(build.sequences)
        seconds["recompute"] = time.perf_counter() - clock
    metrics = trainer.train_step(build.sequences)
    seconds["train"] = metrics.seconds
    clock = time.perf_counter()
    name = f"bench-rl-step{step}"
    folder = trainer.save_adapter(out / name)
    seconds["save"] = time.perf_counter() - clock
    if args.vllm:
        clock = time.perf_counter()
        adapter_load(args.vllm, name=name, path=folder)
        seconds["publish"] = time.perf_counter() - clock
    figures = {
        "sequences": metrics.sequences,
        "excluded": len(build.exclusions),
        "chain_breaks": len(build.breaks),
        "sampled_tokens": metrics.tokens,
        "context_tokens": metrics.context_tokens,
        "logprob_gap_mean": metrics.logprob_gap,
        "logprob_gap_max": metrics.logprob_gap_max,
        "entropy": metrics.entropy,
        "loss": metrics.loss,
        "grad_norm": metrics.grad_norm,
    }
    return seconds, figures, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / ".llm" / "smollm2-135m-instruct")
    parser.add_argument("--vllm", default="", help="a vLLM /v1 URL serving the same model")
    parser.add_argument("--served-model", default="smollm2")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=200, help="synthetic only")
    parser.add_argument("--tool-tokens", type=int, default=60, help="synthetic only")
    parser.add_argument("--loss", choices=("cispo", "grpo"), default="cispo")
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()

    clock = time.perf_counter()
    trainer = PolicyTrainer(args.model_dir, settings=TrainSettings(loss=args.loss, lr=args.lr))
    print(f"load model + LoRA: {time.perf_counter() - clock:.2f} s")
    model, published = args.served_model, []
    totals: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rl-") as tmp:
        try:
            for step in range(args.steps):
                seconds, figures, name = run_step(trainer, args, step, model, Path(tmp))
                if args.vllm:
                    model = name
                    published.append(name)
                for phase, s in seconds.items():
                    totals.setdefault(phase, []).append(s)
                phases = "  ".join(f"{k} {v:.2f}s" for k, v in seconds.items())
                print(f"step {step}: {phases}")
                print("        " + "  ".join(f"{k} {v:.3g}" for k, v in figures.items()))
        finally:
            for name in published:
                adapter_unload(args.vllm, name=name)
    print("median seconds per phase: " + "  ".join(
        f"{k} {statistics.median(v):.2f}" for k, v in totals.items()
    ))  # fmt: skip


if __name__ == "__main__":
    main()
