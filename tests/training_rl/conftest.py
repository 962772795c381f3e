"""Fixtures for the trainer and RL job tests: a folder that passes for model weights, and
the fake model server whose runtime LoRA endpoints jobs publish to (the SmolLM2 folder is
shared: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def lora_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model="smollm2") as server:
        yield server


@pytest.fixture
def weights_dir(tmp_path: Path) -> Path:
    """A folder that looks like model weights to the create checks (the trainer is never
    started on it)."""
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


@pytest.fixture
def llm_policy(lora_server: FakeOpenAIServer) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=lora_server.base_url,
        model="smollm2",
        tool_call_format="json_schema",
        sampling={"temperature": 1.0, "max_tokens": 64},
    )
