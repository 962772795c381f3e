"""The policy configs training writes: a served adapter (an RL policy version, an SFT job's
result) as a policy that samples like the one it was trained from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_app.models import PolicyConfig, PolicyKind


def adapter_policy(
    base: PolicyConfig, *, name: str, model: str, sampling: Mapping[str, Any] | None = None
) -> PolicyConfig:
    """The policy `name`: `base`'s server, prompt, tool-call format and context mode, the
    served `model`, and `sampling` (default: `base`'s). Written again if it exists, so a
    retried publish leaves one row."""
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
        },
    )
    return policy
