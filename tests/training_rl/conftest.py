"""Fixtures for the trainer and RL job tests: the local SmolLM2 folder, a folder that passes
for model weights, and the fake model server whose runtime LoRA endpoints jobs publish to."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from tests.paths import ROOT


def model_dir() -> Path:
    """SmolLM2-135M-Instruct as `make llm` lays it out (LLM_DIR overrides .llm/)."""
    return Path(os.environ.get("LLM_DIR", ROOT / ".llm")) / "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    for package in ("torch", "transformers", "peft"):
        pytest.importorskip(package, reason=f"the trainer needs {package} (the 'train' extra)")
    path = model_dir()
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"no SmolLM2 safetensors folder at {path}: run `make llm` (or set LLM_DIR)")
    return path


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir))


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
