"""Fixtures for the rollout, recording and page tests; the shared ones are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from tests import factories
from trajectories.models import RolloutBatch


@pytest.fixture
def unreachable_llm_policy(db) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="nowhere",
        kind=PolicyKind.OPENAI,
        base_url="http://127.0.0.1:9/v1",
        model="m",
        sampling={"max_tokens": 32},
    )


@pytest.fixture
def batch_of(
    demo_benchmark: Benchmark, baseline_policy: PolicyConfig
) -> Callable[..., RolloutBatch]:
    """A function running a batch of the baseline on the demo benchmark: batch_of(**kwargs)."""

    def played(**batch: Any) -> RolloutBatch:
        return factories.batch_played(demo_benchmark, baseline_policy, **batch)

    return played
