"""Serve a saved adapter through vLLM: the new policy version becomes a model name.

vLLM loads a peft folder at run time with POST /v1/load_lora_adapter when it was started
with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (scripts/llm/serve.sh does
both). The path is read by the server, so it must be visible on the server's filesystem;
with several replicas (VLLM_BASE_URLS), on each of theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import httpx


class PublishError(RuntimeError):
    """The server refused the adapter; the message carries its answer."""


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _post(base_url: str, path: str, body: dict[str, str], timeout_s: float, api_key: str) -> None:
    url = f"{base_url.rstrip('/')}{path}"
    try:
        response = httpx.post(url, json=body, timeout=timeout_s, headers=_headers(api_key))
    except httpx.HTTPError as exc:
        raise PublishError(f"{url}: {exc}") from exc
    if response.status_code >= 400:
        raise PublishError(f"{url} answered {response.status_code}: {response.text[:500]}")


def adapter_load(
    base_url: str, *, name: str, path: Path, timeout_s: float = 120.0, api_key: str = ""
) -> None:
    """Serve the adapter at `path` as model `name` (`base_url` ends in /v1)."""
    body = {"lora_name": name, "lora_path": str(Path(path).resolve())}
    _post(base_url, "/load_lora_adapter", body, timeout_s, api_key)


def adapter_unload(base_url: str, *, name: str, timeout_s: float = 30.0, api_key: str = "") -> None:
    _post(base_url, "/unload_lora_adapter", {"lora_name": name}, timeout_s, api_key)


def served_models(base_url: str, *, timeout_s: float = 30.0, api_key: str = "") -> set[str]:
    """The model names the server answers to: the base model and every loaded adapter."""
    url = f"{base_url.rstrip('/')}/models"
    try:
        response = httpx.get(url, timeout=timeout_s, headers=_headers(api_key))
        response.raise_for_status()
        return {str(m["id"]) for m in response.json()["data"]}
    except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
        raise PublishError(f"{url}: cannot list the served models: {exc}") from exc


def adapter_serve(base_url: str, *, name: str, path: Path, api_key: str = "") -> None:
    """Serve `path` as `name`, replacing an adapter already loaded under that name (a
    retried publish must serve the weights just saved, not the ones from the failed try)."""
    if name in served_models(base_url, api_key=api_key):
        adapter_unload(base_url, name=name, api_key=api_key)
    adapter_load(base_url, name=name, path=path, api_key=api_key)


def adapter_ensure_served(base_url: str, *, name: str, path: Path, api_key: str = "") -> bool:
    """Load the adapter unless the server already has it (e.g. after a server restart,
    which forgets runtime adapters); True when it had to be loaded."""
    if name in served_models(base_url, api_key=api_key):
        return False
    adapter_load(base_url, name=name, path=path, api_key=api_key)
    return True


def adapters_serve(urls: Sequence[str], *, name: str, path: Path, api_key: str = "") -> None:
    """Serve the adapter on every replica. Each is tried; a replica that refuses (or does
    not answer) fails the publish with an error naming it, since a version served on some
    replicas only would fail the calls routed to the others."""
    _on_every(urls, lambda url: adapter_serve(url, name=name, path=path, api_key=api_key))


def adapters_ensure_served(
    urls: Sequence[str], *, name: str, path: Path, api_key: str = ""
) -> list[str]:
    """Load the adapter on each replica that lacks it (a restarted one); the URLs loaded."""
    loaded: list[str] = []

    def ensure(url: str) -> None:
        if adapter_ensure_served(url, name=name, path=path, api_key=api_key):
            loaded.append(url)

    _on_every(urls, ensure)
    return loaded


def _on_every(urls: Sequence[str], action: Callable[[str], None]) -> None:
    failed: list[str] = []
    for url in urls:
        try:
            action(url)
        except PublishError as exc:
            failed.append(str(exc))
    if failed:
        served = len(urls) - len(failed)
        raise PublishError(
            f"{len(failed)} of {len(urls)} replicas did not serve the adapter "
            f"({served} did): " + "; ".join(failed)
        )
