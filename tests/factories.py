"""Builders shared across the test packages (plain functions, no fixtures): the demo
benchmark, users and API clients, batches played in-process, and rows written directly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from django.test import TestCase
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.benchmarks import benchmark_import
from harness_app.services.users import user_ensure
from tests.paths import DEMO_DIR
from trajectories.models import (
    Episode,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    RolloutGroup,
    pack_floats,
    pack_ints,
)
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

# Untrusted text as it could come from a corpus, a query file or a model.
SCRIPT = "<script>alert('xss')</script>"
IMG = '<img src=x onerror="alert(1)">'
JS_URL = "javascript:alert(1)"
PAYLOADS = (SCRIPT, IMG)


def demo_benchmark() -> Benchmark:
    result = benchmark_import(path=DEMO_DIR, name="demo", fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


def baseline_policy() -> PolicyConfig:
    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    return policy


def user(username: str, role: Role | None) -> Any:
    created, _ = user_ensure(username=username, password="pw-123456", role=role)
    return created


def client_for(account: Any | None) -> APIClient:
    """An API client sending the account's token; without an account, no credentials."""
    client = APIClient()
    if account is not None:
        token, _ = Token.objects.get_or_create(user=account)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def batch_played(benchmark: Benchmark, policy: PolicyConfig, **batch: Any) -> RolloutBatch:
    """A batch whose episodes all ran here, turn rows and all. Its on-commit enqueue is
    captured and dropped, so nothing is queued even where the test's transaction commits
    (the browser tests')."""
    with TestCase.captureOnCommitCallbacks():
        created = batch_create(benchmark=benchmark, policy=policy, **batch)
    for episode_id in created.episodes.order_by("pk").values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    created.refresh_from_db()
    return created


def run_batch(
    benchmark: Benchmark, policy: PolicyConfig, *, queries: int = 2, samples: int = 1
) -> RolloutBatch:
    return batch_played(benchmark, policy, query_limit=queries, samples_per_query=samples)


def synthetic_episodes(batch: RolloutBatch, count: int, **fields: Any) -> list[Episode]:
    """`count` finished episodes without turns, in one new group of the batch."""
    query = batch.benchmark.queries.exclude(rolloutgroup__batch=batch).first()
    assert query is not None, "the benchmark has no query left for another group"
    group = RolloutGroup.objects.create(batch=batch, query=query)
    defaults: dict[str, Any] = {
        "status": EpisodeStatus.COMPLETED,
        "termination_reason": "end_search",
        "reward": 0.5,
        "curated_recall": 0.5,
        "final_answer_recall": 0.5,
        "trajectory_recall": 0.5,
        "tool_diversity": 3,
        "turns": 5,
        "finished_at": timezone.now(),
    }
    return Episode.objects.bulk_create(
        Episode(group=group, batch=batch, query=query, sample_index=i, **{**defaults, **fields})
        for i in range(count)
    )


def model_call_create(
    episode: Episode,
    *,
    turn_index: int,
    prompt: list[int] | None = None,
    completion: list[int] | None = None,
    logprobs: list[float] | None = None,
    content: str = "searching",
    token_text: str | None = None,
) -> ModelCall:
    """A successful chat completion with token ids and logprobs, as the vLLM client stores."""
    prompt = prompt if prompt is not None else [1, 2, 3, 4]
    completion = completion if completion is not None else [7, 8, 9]
    logprobs = logprobs if logprobs is not None else [-0.01, -0.7, -4.0][: len(completion)]
    pairs = zip(completion, logprobs, strict=True)
    items = [{"token": token_text or f"t{i}", "logprob": lp} for i, lp in pairs]
    response = {
        "choices": [
            {
                "message": {"role": "assistant", "content": content},
                "logprobs": {"content": items},
                "finish_reason": "stop",
            }
        ]
    }
    return ModelCall.objects.create(
        episode=episode,
        turn_index=turn_index,
        request={"messages": []},
        response=response,
        prompt_token_ids_blob=pack_ints(prompt),
        completion_token_ids_blob=pack_ints(completion),
        completion_logprobs_blob=pack_floats(logprobs),
        finish_reason="stop",
        usage={"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
        policy_version="test@m",
    )


def write_hostile_demo(folder: Path) -> Path:
    """The demo benchmark with markup in a relevant document, its title and an answer."""
    shutil.copytree(DEMO_DIR, folder)
    rows = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    for row in rows:
        if row["_id"] == "Vell_lamp":
            row["title"] = f"Vell lamp {IMG}"
            row["text"] += f" Its maker wrote {SCRIPT} and {JS_URL} in the margin."
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    queries[0]["metadata"]["answer"] = f"Vire River {SCRIPT}"
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return folder


def harness_group_finished(rewards: list[float | None], **group: Any) -> Any:
    """A `command` harness group whose runs each recorded two chat calls (one chain) and
    were closed with these rewards, as `harness_run_execute` leaves them, without running
    anything: for the export, API and page tests."""
    from trajectories.models import HarnessGroup, HarnessGroupStatus, HarnessRun, HarnessRunStatus
    from trajectories.services import harness_runs, recording

    task = harness_runs.harness_task_create(
        name="fix the bug",
        instruction="Make the tests pass.",
        files={"calc.py": "def add(a, b):\n    return a - b\n"},
        eval_command="python -m pytest -q",
    )
    launched = harness_runs.harness_group_launch(
        **{"task": task, "kind": "command", "command": ["agent"], "model": "m", **group},
        size=len(rewards),
        enqueue=False,
    )
    for run, reward in zip(launched.runs.order_by("index"), rewards, strict=True):
        prompt = [1, 10, 70, 2, 1, 12]
        for turn in range(2):
            completion = [100 + run.index, 101, 2]
            recording.recorded_call_save(
                session=run.session,
                call=recording.RecordedCall(
                    request={"messages": [{"role": "user", "content": "go"}]},
                    response={
                        "choices": [{"message": {"content": f"step {turn}"}}],
                        "usage": {"prompt_tokens": len(prompt), "completion_tokens": 3},
                    },
                    prompt_ids=prompt,
                    completion_ids=completion,
                    logprobs=[-0.5, -0.25, -0.125],
                    agent="main",
                    policy_version="m",
                    latency_ms=12.0,
                ),
            )
            prompt = [*prompt, *completion, 1, 11, 71, 2, 1, 12]
        HarnessRun.objects.filter(pk=run.pk).update(
            status=HarnessRunStatus.SUCCEEDED,
            exit_code=0,
            reward=reward,
            eval_exit_code=0 if reward == 1.0 else 1,
            eval_output=f"reward: {reward}",
            stdout="agent done",
            seconds=1.5,
            started_at=timezone.now(),
            finished_at=timezone.now(),
        )
        recording.recording_session_close(session=run.session, reward=reward)
    HarnessGroup.objects.filter(pk=launched.pk).update(
        status=HarnessGroupStatus.FINISHED, finished_at=timezone.now()
    )
    launched.refresh_from_db()
    return launched


def policy_form(**fields: Any) -> dict[str, Any]:
    """The policy pages' form data: every optional field at its blank default; `fields` give
    the name, kind, server, model and sampling, and override any default."""
    return {
        "system_prompt_version": "v1",
        "tool_call_format": "openai_tools",
        "tool_parser": "hermes",
        "context_mode": "append",
        "context_limit": "",
        "retriever": "bm25",
        "verifier": "lexical",
        "verifier_base_url": "",
        "verifier_model": "",
        "reranker_base_url": "",
        "reranker_model": "",
        **fields,
    }
