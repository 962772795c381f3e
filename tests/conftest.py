"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def shared_data_root() -> Path:
    """../shared/data beside the project, or HARNESS_SHARED_DATA when set."""
    override = os.environ.get("HARNESS_SHARED_DATA")
    return Path(override) if override else (ROOT.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = shared_data_root()
    if not root.is_dir():
        pytest.skip(f"shared benchmark data not found at {root} (set HARNESS_SHARED_DATA)")
    return root


@pytest.fixture(scope="session")
def hotpotqa_dir(shared_data: Path) -> Path:
    path = shared_data / "hotpotqa-dev500"
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"hotpotqa-dev500 not found under {shared_data}")
    return path


@pytest.fixture(scope="session")
def scifact_dir(shared_data: Path) -> Path:
    path = shared_data / "scifact"
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"scifact not found under {shared_data}")
    return path


pytest_plugins = ["tests.workers", "tests.chromium"]


@pytest.fixture
def served_model() -> str:
    """The real vLLM server's base model (tests/vllm.py); use with `needs_vllm`."""
    from tests.vllm import base_model

    return base_model()
