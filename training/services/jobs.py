"""What the SFT and RL job services share: the error that names the refused setting, the
set-up check before a job is written (a vLLM policy, the weights on disk, the trainer's
libraries), and serving a trained adapter from the base policy's server (every replica)."""

from __future__ import annotations

import importlib.util
from collections.abc import Collection
from pathlib import Path
from typing import Any

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.policy_hosts import model_server_urls, policy_base_url
from training.rl import publish
from training.services.policies import base_model_dir_problem
from trajectories.rollout import model_server_api_key


class TrainingJobError(ValueError):
    """A job request that cannot run; the message names the setting and the fix.

    `field` is the create function's argument or the settings field refused (the launch
    form and the API show the message on it), or None when no single setting is at fault.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def job_row_fields(
    *, name: str, base_policy: PolicyConfig, base_model_dir: str, created_by: Any
) -> dict[str, Any]:
    """The columns every new job's row takes from its request: the weights folder as an
    absolute path (the worker's current folder may differ), the creator when it is a
    saved user."""
    return {
        "name": name,
        "base_policy": base_policy,
        "base_model_dir": str(Path(base_model_dir).resolve()),
        "created_by": created_by if getattr(created_by, "pk", None) else None,
    }


def trainable_setup_check(
    base_policy: PolicyConfig,
    base_model_dir: str,
    *,
    packages: Collection[str],
    why_vllm: str,
    error: type[TrainingJobError],
) -> None:
    """Refuse, with `error`, a base policy that is not served by vLLM (`why_vllm` says what
    the job needs it for), weights that are not there, or a trainer library missing."""
    if base_policy.kind != PolicyKind.OPENAI:
        raise error(
            f"base_policy {base_policy.name!r} is the {base_policy.get_kind_display()}; "
            + why_vllm,
            field="base_policy",
        )
    problem = base_model_dir_problem(base_model_dir)
    if problem:
        raise error(problem, field="base_model_dir")
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise error(
            f"the trainer needs {', '.join(missing)}: install the 'train' extra "
            "(pip install -e '.[train]')"
        )


def policy_adapter_serve(base_policy: PolicyConfig, *, name: str, path: Path) -> None:
    """Load the adapter as model `name` into every replica of the base policy's server, or
    raise PublishError naming the one that refused."""
    base_url = policy_base_url(base_policy)
    publish.adapters_serve(
        model_server_urls(base_url), name=name, path=path, api_key=model_server_api_key(base_url)
    )


def policy_adapter_ensure_served(base_policy: PolicyConfig, *, name: str, path: Path) -> bool:
    """Load the adapter again where a replica forgot it (a restarted vLLM drops runtime
    adapters); True when one had to be loaded. Raises PublishError."""
    base_url = policy_base_url(base_policy)
    loaded = publish.adapters_ensure_served(
        model_server_urls(base_url), name=name, path=path, api_key=model_server_api_key(base_url)
    )
    return bool(loaded)
