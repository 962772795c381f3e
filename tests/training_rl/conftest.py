"""Fixtures for the trainer tests: the local SmolLM2 folder and sequences built on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
