"""A reference outside trainer for the rollout service (docs/api.md, "Rollout service").

It speaks HTTP only (httpx): no import of this project. It submits a batch spec (or
joins an existing request), pulls evaluated groups as they finish, turns each into the
tensors a policy-gradient step consumes, and acknowledges the group once that step is
done. Every event is one JSON line on stdout, so another program can follow it.

By default the "step" computes the loss inputs, not a model update: per sequence the input
ids, the loss mask, the per-token advantage and the sampler's logprobs, and the surrogate
-sum(A * mask) / sum(mask) at ratio 1 (the value a CISPO or GRPO step starts from). On a
2-core CPU a real forward and backward of even SmolLM2-135M takes minutes per group of
real episodes (DEVELOPERS.md). With `--model-dir` (the weights vLLM serves, and the
project's `train` extra installed) each step is a real LoRA CISPO step of the built-in
trainer (training/rl/trainer.py) on the pulled sequences; any other trainer (verl, slime,
SkyRL, TRL) plugs in at the same place.

    python examples/external_trainer.py --base-url http://127.0.0.1:8000 --token KEY \\
        --benchmark 1 --policy 2 --group-size 4 --groups 8 --over-sample 1.5

Delivery is at-least-once: a group pulled again after a crash carries the same `delivery`
id, so a trainer that must not see a group twice keeps the ids it has trained on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class LossInputs:
    """What one group contributes to a step: flat per-token lists, one row per sequence."""

    input_ids: list[list[int]] = field(default_factory=list)
    loss_mask: list[list[int]] = field(default_factory=list)
    advantages: list[list[float]] = field(default_factory=list)
    old_logprobs: list[list[float]] = field(default_factory=list)

    @property
    def trained_tokens(self) -> int:
        return sum(sum(m) for m in self.loss_mask)

    def surrogate(self) -> float:
        """-mean over trained tokens of A (the policy-gradient loss at ratio 1)."""
        total = sum(
            a * m
            for row_a, row_m in zip(self.advantages, self.loss_mask, strict=True)
            for a, m in zip(row_a, row_m, strict=True)
        )
        return -total / self.trained_tokens if self.trained_tokens else 0.0


def loss_inputs(group: dict[str, Any]) -> LossInputs:
    """Prompt tokens are context (mask 0); the response's mask marks the sampled tokens."""
    out = LossInputs()
    for sample in group["samples"]:
        prompt, response = sample["prompt_ids"], sample["response_ids"]
        mask = [0] * len(prompt) + sample["loss_mask"]
        out.input_ids.append(prompt + response)
        out.loss_mask.append(mask)
        out.advantages.append([sample["advantage"] * m for m in mask])
        out.old_logprobs.append([0.0] * len(prompt) + sample["rollout_logprobs"])
    return out


def train_step(groups: list[dict[str, Any]]) -> dict[str, float]:
    """Where a real trainer steps; this one reports the loss inputs it would get."""
    inputs = [loss_inputs(g) for g in groups]
    tokens = sum(i.trained_tokens for i in inputs)
    weighted = sum(i.surrogate() * i.trained_tokens for i in inputs)
    return {"trained_tokens": tokens, "surrogate": weighted / tokens if tokens else 0.0}


class BuiltinTrainer:
    """The project's LoRA trainer, fed the pulled samples as its TrainSequence rows."""

    def __init__(self, model_dir: str) -> None:
        from training.rl.trainer import PolicyTrainer, TrainSettings

        self.trainer = PolicyTrainer(model_dir, settings=TrainSettings(loss="cispo"))

    def __call__(self, groups: list[dict[str, Any]]) -> dict[str, float]:
        from training.rl.batches import TrainSequence

        names = TrainSequence.__dataclass_fields__
        rows = [
            TrainSequence(**{k: v for k, v in s.items() if k in names})
            for g in groups
            for s in g["samples"]
        ]
        metrics = self.trainer.train_step(rows)
        return {"trained_tokens": metrics.tokens, "loss": metrics.loss, "seconds": metrics.seconds}


def emit(event: str, **data: Any) -> None:
    print(json.dumps({"event": event, **data}), flush=True)


class ServiceClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 60.0) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/",
            headers={"Authorization": f"Token {token}"},
            timeout=timeout_s,
        )

    def _post(self, path: str, body: dict[str, Any], ok: tuple[int, ...] = (200, 201)) -> Any:
        response = self.http.post(path, json=body)
        if response.status_code not in ok:
            raise SystemExit(f"POST {path} answered {response.status_code}: {response.text}")
        return response.json()

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self._post("rollout-requests/", spec)

    def pull(self, request_id: int, **body: Any) -> dict[str, Any]:
        return self._post(f"rollout-requests/{request_id}/pull/", body)

    def ack(self, request_id: int, lease: str) -> dict[str, Any]:
        return self._post(f"rollout-requests/{request_id}/ack/", {"lease": lease}, ok=(200, 409))


def run(args: argparse.Namespace) -> int:
    client = ServiceClient(args.base_url, args.token)
    step = BuiltinTrainer(args.model_dir) if args.model_dir else train_step
    request_id = args.request
    if request_id is None:
        spec = {
            "benchmark": args.benchmark,
            "policy": args.policy,
            "policy_version": args.policy_version,
            "group_size": args.group_size,
            "groups_wanted": args.groups,
            "over_sample": args.over_sample,
            "staleness_bound": args.staleness_bound,
            "lease_s": args.lease_s,
        }
        request_id = client.submit(spec)["id"]
        emit("submitted", request=request_id)
    seen: set[int] = set()
    while True:
        pulled = client.pull(
            request_id,
            policy_version=args.policy_version,
            max_groups=args.groups_per_step,
            consumer=args.consumer,
            wait_s=args.wait_s,
        )
        groups = [g for g in pulled["groups"] if g["delivery"] not in seen]
        for group in pulled["groups"]:
            emit(
                "pulled",
                delivery=group["delivery"],
                lease=group["lease"],
                times_delivered=group["times_delivered"],
                rewards=group["rewards"],
            )
        if groups:
            time.sleep(args.step_s)  # a stand-in for the time a real step takes
            emit("stepped", groups=[g["delivery"] for g in groups], **step(groups))
            seen.update(g["delivery"] for g in groups)
        for group in pulled["groups"]:
            answer = client.ack(request_id, group["lease"])
            emit("acked", delivery=group["delivery"], answer=answer)
        if pulled["status"] != "open":
            # satisfied, exhausted (fewer groups than wanted could be delivered) or cancelled
            emit(
                "done",
                status=pulled["status"],
                reason=pulled["reason"],
                counts=pulled["counts"],
                trained=len(seen),
            )
            return 0 if pulled["status"] == "satisfied" else 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base-url", required=True)
    p.add_argument("--token", required=True, help="an API token of a researcher")
    p.add_argument("--request", type=int, help="join this request instead of submitting one")
    p.add_argument("--benchmark", type=int)
    p.add_argument("--policy", type=int)
    p.add_argument("--policy-version", type=int, default=0)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups", type=int, default=8, help="groups wanted")
    p.add_argument("--over-sample", type=float, default=1.0)
    p.add_argument("--staleness-bound", type=int, default=0)
    p.add_argument("--lease-s", type=int, default=300)
    p.add_argument("--groups-per-step", type=int, default=2)
    p.add_argument("--wait-s", type=float, default=10.0, help="long-poll each pull this long")
    p.add_argument("--step-s", type=float, default=0.0, help="pretend each step takes this long")
    p.add_argument("--consumer", default="external_trainer")
    p.add_argument("--model-dir", help="train for real: the built-in LoRA trainer on these weights")
    args = p.parse_args(argv)
    if args.request is None and (args.benchmark is None or args.policy is None):
        p.error("--benchmark and --policy are needed unless --request joins a request")
    return args


if __name__ == "__main__":
    sys.exit(run(parse_args(sys.argv[1:])))
