"""The sampled baseline on the demo benchmark: samples of one question differ, the same
seed gives the same episode (in another process too), mechanisms change its means, and
the ablation matrix's runs spread where the deterministic baseline's cannot."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from harness_app.harness.ablation import Ablation
from harness_app.harness.ablation_matrix import matrix_run
from harness_app.harness.beir import beir_queries
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.policies import (
    POLICY_FACTORIES,
    BaselinePolicy,
    SampledBaselinePolicy,
    make_policy,
    rule_policy,
)
from harness_app.harness.retrieval import open_index
from harness_app.harness.runner import EpisodeResult, run_episode
from harness_app.harness.types import Retriever
from tests.paths import DEMO_DIR, ROOT


@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory) -> Retriever:
    return open_index(DEMO_DIR, tmp_path_factory.mktemp("idx"))


def _play(retriever: Retriever, seed: int, *, ablation: Ablation | None = None, query: int = 0):
    env = SearchHarness(retriever, config=HarnessConfig(), ablation=ablation or Ablation())
    tools = [schema["function"]["name"] for schema in env.tool_schemas()]
    question = beir_queries(DEMO_DIR, "test")[query]
    return run_episode(env, make_policy("baseline_sampled", tools=tools, seed=seed), question)


def _trace(result: EpisodeResult) -> list[list[list[str]]]:
    return [
        [[call["name"], json.dumps(call["arguments"], sort_keys=True)] for call in turn.tool_calls]
        for turn in result.turns
    ]


def test_it_is_registered_beside_the_baseline() -> None:
    assert {"baseline", "baseline_sampled"} <= set(POLICY_FACTORIES)
    assert isinstance(make_policy("baseline_sampled", seed=3), SampledBaselinePolicy)
    assert isinstance(rule_policy(temperature=0), BaselinePolicy)
    assert not isinstance(rule_policy(temperature=0), SampledBaselinePolicy)
    assert isinstance(rule_policy(temperature=0.2, seed=1), SampledBaselinePolicy)


def test_two_samples_of_a_question_differ(retriever) -> None:
    traces = {json.dumps(_trace(_play(retriever, seed))) for seed in range(4)}
    assert len(traces) > 1


def test_the_same_seed_replays_the_same_episode(retriever) -> None:
    first, again = _play(retriever, 7), _play(retriever, 7)
    assert _trace(first) == _trace(again)
    assert first.metrics == again.metrics


def test_the_same_seed_replays_in_another_process(retriever, tmp_path) -> None:
    # String seeds are hashed with SHA-512, not hash(): PYTHONHASHSEED must not matter.
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from tests.harness.test_sampled_baseline import _play, _trace;"
        "from harness_app.harness.retrieval import open_index;"
        "from tests.paths import DEMO_DIR;"
        "print(json.dumps(_trace(_play(open_index(DEMO_DIR, sys.argv[2]), 7))))"
    )
    index_dir = tmp_path / "idx"
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", script, str(ROOT), str(index_dir)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=ROOT,
        )
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] == _trace(_play(retriever, 7))


def test_two_conditions_give_different_means_on_the_demo(retriever) -> None:
    def mean_recall(ablation: Ablation) -> float:
        return statistics.fmean(
            _play(retriever, seed, ablation=ablation, query=q).metrics.curated_recall
            for seed in range(3)
            for q in range(12)
        )

    assert mean_recall(Ablation()) != mean_recall(Ablation().without("verification"))


def test_the_matrix_runs_spread_with_it_and_not_with_the_baseline(retriever) -> None:
    queries = beir_queries(DEMO_DIR, "test")

    def entries(policy: str) -> list[dict]:
        return matrix_run(
            retriever,
            queries,
            conditions=[
                ("full", Ablation()),
                ("-verification", Ablation().without("verification")),
            ],
            policy_name=policy,
            runs=3,
            config=HarnessConfig(max_turns=40),
        )

    baseline, sampled = entries("baseline"), entries("baseline_sampled")
    assert all(e["recall_std"] == 0 for e in baseline)
    assert baseline[0]["recall_mean"] == baseline[1]["recall_mean"]
    assert any(e["recall_std"] > 0 for e in sampled)
    assert sampled[0]["recall_mean"] != sampled[1]["recall_mean"]


def test_a_temperature_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="temperature must be above 0"):
        SampledBaselinePolicy(temperature=0)
