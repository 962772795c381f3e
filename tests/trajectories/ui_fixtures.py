"""Data for the researcher-page tests: real episodes of the demo benchmark, run in-process.

Episodes are created by `batch_create` (its on-commit enqueue captured, so no task is sent)
and played by `episode_run`, so turns, states and final-state rows are the real thing.
Model calls, which the baseline policy does not make, are written directly.

Test modules load this file with `pytest_plugins` and take everything, helpers included,
as fixtures: importing from it as well would defeat pytest's assertion rewriting.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness_app.models import Benchmark, PolicyConfig
from harness_app.roles import Role
from harness_app.services.benchmarks import benchmark_import
from harness_app.services.users import user_ensure
from trajectories.models import Episode, ModelCall, RolloutBatch, pack_floats, pack_ints
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

DEMO_DIR = Path(__file__).resolve().parents[2] / "harness_app" / "demo_data"
PASSWORD = "pw-for-tests-123"
# Untrusted text as it could come from a corpus, a query file or a model.
SCRIPT = "<script>alert('xss')</script>"
IMG = '<img src=x onerror="alert(1)">'
JS_URL = "javascript:alert(1)"
PAYLOADS = (SCRIPT, IMG)


def client_for(client: Any, username: str, role: Role | None) -> Any:
    user, _ = user_ensure(username=username, password=PASSWORD, role=role)
    client.force_login(user)
    return client


@pytest.fixture
def researcher_client(client, db):
    return client_for(client, "rita", Role.RESEARCHER)


@pytest.fixture
def annotator_client(client, db):
    return client_for(client, "arno", Role.ANNOTATOR)


def run_batch(
    benchmark: Benchmark,
    policy: PolicyConfig,
    capture: Callable[..., Any],
    **kwargs: Any,
) -> RolloutBatch:
    """Create a batch without enqueueing it, then play every episode here."""
    with capture():
        batch = batch_create(benchmark=benchmark, policy=policy, **kwargs)
    for episode_id in batch.episodes.order_by("pk").values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    batch.refresh_from_db()
    return batch


# The same as tests/trajectories/conftest.py's, which take precedence there; these serve the
# browser tests, which load this module from another directory.
@pytest.fixture
def demo_benchmark(db) -> Benchmark:
    result = benchmark_import(path=DEMO_DIR, name="demo", fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


@pytest.fixture
def baseline_policy(db) -> PolicyConfig:
    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind="baseline")
    return policy


@pytest.fixture
def batch_of(demo_benchmark, baseline_policy, django_capture_on_commit_callbacks):
    """A function running a batch of the baseline on the demo benchmark: batch_of(**kwargs)."""
    return lambda **kwargs: run_batch(
        demo_benchmark, baseline_policy, django_capture_on_commit_callbacks, **kwargs
    )


@pytest.fixture
def new_model_call():
    """model_call_create, for tests: the test modules take helpers as fixtures only."""
    return model_call_create


@pytest.fixture
def payloads() -> SimpleNamespace:
    return SimpleNamespace(script=SCRIPT, img=IMG, js_url=JS_URL, all=PAYLOADS)


@pytest.fixture
def ran_batch(demo_benchmark, baseline_policy, django_capture_on_commit_callbacks):
    """Two queries × two samples of the baseline policy on the demo benchmark."""
    return run_batch(
        demo_benchmark,
        baseline_policy,
        django_capture_on_commit_callbacks,
        query_limit=2,
        samples_per_query=2,
    )


@pytest.fixture
def episode(ran_batch) -> Episode:
    return ran_batch.episodes.select_related("query").order_by("pk").first()


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


@pytest.fixture
def hostile_episode(tmp_path, baseline_policy, django_capture_on_commit_callbacks) -> Episode:
    """A real episode over hostile documents, plus a hostile model reply and observation."""
    result = benchmark_import(
        path=write_hostile_demo(tmp_path / "hostile"), name="hostile", fmt="beir"
    )
    benchmark = Benchmark.objects.get(pk=result.benchmark_id)
    batch = run_batch(benchmark, baseline_policy, django_capture_on_commit_callbacks, query_limit=1)
    episode = batch.episodes.get()
    turn = episode.turn_rows.get(index=1)
    turn.observation += f"\n{IMG} <a href='{JS_URL}'>click</a>"
    turn.save(update_fields=["observation"])
    model_call_create(episode, turn_index=1, content=f"I think {SCRIPT}{IMG}", token_text=SCRIPT)
    return episode


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
