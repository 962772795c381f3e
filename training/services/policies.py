"""The policy configs training writes: a served adapter (an RL policy version, an SFT job's
result) as a policy that samples like the one it was trained from."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness_app.models import PolicyConfig, PolicyKind


def adapter_policy(
    base: PolicyConfig, *, name: str, model: str, sampling: Mapping[str, Any] | None = None
) -> PolicyConfig:
    """The policy `name`: `base`'s server, prompt, tool-call format, context mode, verifier
    and reranker, the served `model`, and `sampling` (default: `base`'s). Written again if
    it exists, so a retried publish leaves one row."""
    policy, _ = PolicyConfig.objects.update_or_create(
        name=name,
        defaults={
            "kind": PolicyKind.OPENAI,
            "base_url": base.base_url,
            "model": model,
            "sampling": dict(base.sampling or {}) if sampling is None else dict(sampling),
            "system_prompt_version": base.system_prompt_version,
            "tool_call_format": base.tool_call_format,
            "tool_parser": base.tool_parser,
            "context_mode": base.context_mode,
            "context_limit": base.context_limit,
            "verifier": base.verifier,
            "verifier_base_url": base.verifier_base_url,
            "verifier_model": base.verifier_model,
            "reranker_base_url": base.reranker_base_url,
            "reranker_model": base.reranker_model,
        },
    )
    return policy


def base_model_dir_problem(base_model_dir: str) -> str:
    """Why `base_model_dir` is not a folder of weights a job can train, or "". A path the
    system cannot even look at (a part over 255 characters, no permission) is said so,
    instead of escaping as an OSError."""
    where = f"base_model_dir {base_model_dir[:200]!r}"
    try:
        found = (Path(base_model_dir) / "config.json").is_file()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{where} cannot be read: {reason}"
    if not found:
        return (
            f"{where} has no config.json: give the local folder of the weights the vLLM "
            "server serves (make llm writes .llm/smollm2-135m-instruct)"
        )
    return ""
