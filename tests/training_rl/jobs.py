"""The RL job tests' fixtures: a fake of vLLM's runtime LoRA endpoints, a folder that
passes for model weights, a job on the demo benchmark, and rollouts written on paper."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from training.models import RLJob
from training.services.rl_jobs import RLJobSettings, rl_job_create
from trajectories.models import (
    BatchStatus,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    pack_floats,
    pack_ints,
)


class FakeLoraServer:
    """GET /v1/models and the runtime LoRA endpoints, as vLLM answers them."""

    def __init__(self) -> None:
        self.models = {"smollm2"}
        self.loads: list[dict[str, str]] = []
        self.unloads: list[str] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                fake.authorizations.append(self.headers.get("Authorization"))
                self._answer(200, {"data": [{"id": m} for m in sorted(fake.models)]})

            def do_POST(self) -> None:
                fake.authorizations.append(self.headers.get("Authorization"))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/load_lora_adapter"):
                    if body["lora_name"] in fake.models:
                        return self._answer(400, {"error": "already loaded"})
                    fake.loads.append(body)
                    fake.models.add(body["lora_name"])
                elif self.path.endswith("/unload_lora_adapter"):
                    fake.unloads.append(body["lora_name"])
                    fake.models.discard(body["lora_name"])
                self._answer(200, {})

        return Handler


@pytest.fixture
def lora_server():
    server = FakeLoraServer()
    yield server
    server.close()


@pytest.fixture
def weights_dir(tmp_path: Path) -> Path:
    """A folder that looks like model weights to the create checks (the trainer is never
    started on it)."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


@pytest.fixture
def llm_policy(lora_server) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=lora_server.base_url,
        model="smollm2",
        tool_call_format="json_schema",
        sampling={"temperature": 1.0, "max_tokens": 64},
    )


def job_create(benchmark, policy, model_dir, **settings: Any) -> RLJob:
    defaults: dict[str, Any] = {"group_size": 2, "queries_per_step": 2, "steps": 2}
    return rl_job_create(
        benchmark=benchmark,
        base_policy=policy,
        base_model_dir=str(model_dir),
        job_settings=RLJobSettings(**{**defaults, **settings}),
        enqueue=False,
    )


def rollouts_finish(
    batch: RolloutBatch, rewards: list[float], *, status=EpisodeStatus.COMPLETED
) -> None:
    """Play the batch's episodes on paper: each gets a reward (in order of group, then
    sample) and two prefix-merging model calls with SmolLM2-sized token ids."""
    episodes = list(batch.episodes.order_by("group_id", "sample_index"))
    for i, (episode, reward) in enumerate(zip(episodes, rewards, strict=True)):
        episode.status, episode.reward = status, reward
        episode.termination_reason = "end_search" if status == EpisodeStatus.COMPLETED else "x"
        episode.error = "" if status == EpisodeStatus.COMPLETED else "vLLM answered 500"
        episode.curated_recall = reward / 2
        episode.reward_components = {"f_beta": reward / 3, "diversity": 0.1}
        episode.save()
        version = batch.policy.name
        ModelCall.objects.bulk_create(
            ModelCall(
                episode=episode,
                turn_index=turn,
                request={},
                prompt_token_ids_blob=pack_ints(prompt),
                completion_token_ids_blob=pack_ints(completion),
                completion_logprobs_blob=pack_floats([-2.0] * len(completion)),
                policy_version=version,
            )
            for turn, (prompt, completion) in enumerate(
                # Each episode samples different tokens, so their gradients do not cancel.
                [([1, 504, 33], [288 + i, 4521]), ([1, 504, 33, 288 + i, 4521, 30], [77 + i, 2])]
            )
        )
    completed = sum(1 for _ in episodes) if status == EpisodeStatus.COMPLETED else 0
    RolloutBatch.objects.filter(pk=batch.pk).update(
        status=BatchStatus.COMPLETED if completed else BatchStatus.FAILED,
        episodes_completed=completed,
        episodes_failed=len(episodes) - completed,
    )


def step_batch(job: RLJob, index: int) -> RolloutBatch:
    batch = job.step_rows.get(index=index).batch
    assert batch is not None
    return batch
