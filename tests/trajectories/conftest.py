from __future__ import annotations

from pathlib import Path

import pytest

from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from harness_app.services.benchmarks import benchmark_import

DEMO_DIR = Path(__file__).resolve().parents[2] / "harness_app" / "demo_data"


@pytest.fixture
def demo_benchmark(db) -> Benchmark:
    result = benchmark_import(path=DEMO_DIR, name="demo", fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


@pytest.fixture
def baseline_policy(db) -> PolicyConfig:
    policy, _ = PolicyConfig.objects.get_or_create(name="baseline", kind=PolicyKind.BASELINE)
    return policy


@pytest.fixture
def unreachable_llm_policy(db) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="nowhere",
        kind=PolicyKind.OPENAI,
        base_url="http://127.0.0.1:9/v1",
        model="m",
        sampling={"max_tokens": 32},
    )
