"""Every write to policy configs from the page and the API: create, edit, delete.

A config that batches, evaluation runs or training jobs already use is never changed: an
edit writes a new row (`version` one higher, `previous` the row it was edited from, named
"<name> v<version>" unless the edit names it), so every episode keeps the settings it was
made with. An unused config is edited in place, and only an unused one may be deleted.

Before an OpenAI-compatible config is saved, its server is asked for the models it serves
(GET <base URL>/models, a short timeout): a model it does not serve is refused, naming the
ones it does; a server that cannot be asked is said in a warning, and the config is saved.
The rows training writes for its adapters (training/services/policies.py) do not come
through here: their adapter is loaded by the same job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Model

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.policy_hosts import model_server_api_key

MODELS_TIMEOUT_S = 3.0
# What each kind of row that points at a policy config is called on the pages, by model
# label (strings: this app may not import the apps above it).
USE_NAMES = {
    "trajectories.RolloutBatch": ("batch", "batches"),
    "trajectories.EvaluationRun": ("evaluation run", "evaluation runs"),
    "training.SFTJob": ("SFT job", "SFT jobs"),
    "training.RLJob": ("RL job", "RL jobs"),
    "training.PolicyVersion": ("RL policy version", "RL policy versions"),
    "training.RolloutRequest": ("rollout request", "rollout requests"),
}


class PolicyConfigError(ValueError):
    """A save or delete that cannot be done; `field` names the form field at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class PolicySaved:
    """The row that now holds the settings, whether it is a new version, and what the
    page or the API should say besides (the model check's warning)."""

    policy: PolicyConfig
    new_version: bool = False
    warnings: list[str] = field(default_factory=list)


# --- uses ---------------------------------------------------------------------------------


def _use_name(model: type[Model], count: int) -> str:
    meta = model._meta
    singular, plural = USE_NAMES.get(meta.label, (str(meta.verbose_name), f"{meta.verbose_name}s"))
    return f"{count} {singular if count == 1 else plural}"


def policy_config_uses(*, policy_ids: Iterable[int]) -> dict[int, list[str]]:
    """What uses each config ("2 batches", "1 SFT job"), one query per kind of row;
    a config nothing uses is absent."""
    ids = list(policy_ids)
    counts: dict[int, dict[type[Model], int]] = {}
    for relation in PolicyConfig._meta.related_objects:
        model = relation.related_model
        if model is PolicyConfig or not isinstance(model, type):
            continue  # its own versions are not uses
        name = relation.field.name
        rows = (
            model._default_manager.filter(**{f"{name}__in": ids})
            .values(name)
            .annotate(n=Count("pk"))
        )
        for row in rows:
            per_model = counts.setdefault(row[name], {})
            per_model[model] = per_model.get(model, 0) + row["n"]
    return {
        pk: [_use_name(model, n) for model, n in per_model.items()]
        for pk, per_model in counts.items()
    }


def _uses_text(uses: list[str]) -> str:
    return uses[0] if len(uses) == 1 else f"{', '.join(uses[:-1])} and {uses[-1]}"


# --- the model check ----------------------------------------------------------------------


def _model_check(data: Mapping[str, Any]) -> list[str]:
    """Raises PolicyConfigError when the config's server does not serve its model; returns
    a warning when the server cannot be asked."""
    if data.get("kind") != PolicyKind.OPENAI or not data.get("model"):
        return []
    base_url = str(data.get("base_url") or settings.VLLM_BASE_URL).rstrip("/")
    url = f"{base_url}/models"
    headers = {}
    api_key = model_server_api_key(base_url)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        response = httpx.get(url, timeout=MODELS_TIMEOUT_S, headers=headers)
        response.raise_for_status()
        served = sorted(str(entry["id"]) for entry in response.json()["data"])
    except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [
            f"Could not list the models of {url} ({reason}): saved without checking that it "
            f"serves {data['model']!r}. Episodes fail if it does not."
        ]
    if data["model"] not in served:
        listed = ", ".join(repr(name) for name in served) or "none"
        raise PolicyConfigError(
            f"{url} does not serve {data['model']!r}; it serves: {listed}", field="model"
        )
    return []


# --- writes -------------------------------------------------------------------------------


def policy_next_version_name(policy: PolicyConfig) -> str:
    """What an edit of a used `policy` that keeps its name calls the new version."""
    base = policy.name.removesuffix(f" v{policy.version}") if policy.version > 1 else policy.name
    suffix = f" v{policy.version + 1}"
    return base[: 200 - len(suffix)] + suffix


def _check_name_free(name: str, *, other_than: int | None = None) -> None:
    taken = PolicyConfig.objects.filter(name=name)
    if other_than is not None:
        taken = taken.exclude(pk=other_than)
    if taken.exists():
        raise PolicyConfigError(
            f"a policy named {name!r} exists; choose another name", field="name"
        )


def _settings(data: Mapping[str, Any]) -> dict[str, Any]:
    return {name: data[name] for name in PolicyConfig.EDITABLE_FIELDS if name in data}


def policy_config_create(*, data: Mapping[str, Any]) -> PolicySaved:
    """A new config from checked fields (the API's serializer or the page's form). The
    server is asked before the transaction, so no row is locked while it answers."""
    warnings = _model_check(data)
    with transaction.atomic():
        _check_name_free(data["name"])
        policy = PolicyConfig.objects.create(**_settings(data))
    return PolicySaved(policy, warnings=warnings)


def policy_config_update(*, policy: PolicyConfig, data: Mapping[str, Any]) -> PolicySaved:
    """`data` (checked fields; the API's PATCH may give some only) into `policy` if
    nothing uses it, else into its next version. An older version whose successor exists
    is not edited again: two successors of one row would make the versions a tree."""
    stored = PolicyConfig.objects.get(pk=policy.pk)
    warnings = _model_check({**_settings(_as_data(stored)), **_settings(data)})
    with transaction.atomic():
        current = PolicyConfig.objects.select_for_update().get(pk=policy.pk)
        saved = _update(current, _settings(data))
    return PolicySaved(saved, new_version=saved.pk != current.pk, warnings=warnings)


def _update(current: PolicyConfig, changes: dict[str, Any]) -> PolicyConfig:
    uses = policy_config_uses(policy_ids=[current.pk]).get(current.pk)
    if not uses:
        _check_name_free(changes.get("name", current.name), other_than=current.pk)
        for name, value in changes.items():
            setattr(current, name, value)
        current.save()
        return current
    newer = current.next_versions.order_by("pk").first()
    if newer is not None:
        raise PolicyConfigError(
            f"{current.name} is used ({_uses_text(uses)}), so an edit makes a new version, "
            f"and {newer.name} is its newer version: edit that one"
        )
    name = changes.get("name", current.name)
    if name == current.name:
        name = policy_next_version_name(current)
    _check_name_free(name)
    values = {**_settings(_as_data(current)), **changes, "name": name}
    return PolicyConfig.objects.create(**values, version=current.version + 1, previous=current)


def _as_data(policy: PolicyConfig) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in PolicyConfig.EDITABLE_FIELDS}


@transaction.atomic
def policy_config_delete(*, policy: PolicyConfig) -> None:
    """Delete a config nothing uses; a used one is refused, saying what uses it."""
    current = PolicyConfig.objects.select_for_update().get(pk=policy.pk)
    uses = policy_config_uses(policy_ids=[current.pk]).get(current.pk)
    if uses:
        raise PolicyConfigError(
            f"Policy {current.name!r} cannot be deleted: it is used by {_uses_text(uses)}, "
            "whose episodes would lose the settings they were made with. Edit it instead: "
            "that makes a new version."
        )
    current.delete()
