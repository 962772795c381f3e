"""Where a policy config may point: only at hosts named in POLICY_ALLOWED_HOSTS.

A policy's base URL is called by the Celery workers and by the trainer, from inside the
deployment's network. Left open, a researcher's config could aim them at any host there,
the cloud metadata address (169.254.169.254) included. The allowed hosts are names, not
addresses: by default the local vLLM's host, `localhost` and `127.0.0.1`; an entry with
a port (`vllm:8000`) allows that port only; `*` allows any host.

Checked where a config is written (the model field's validator, so the API and the
forms say which field is wrong) and again where one is used, for rows written before
the setting changed. The same rule holds for the harness's services a config names (the
LLM verifier's and the reranker's URLs).

A policy whose base URL is one of the local vLLM's replicas (VLLM_BASE_URLS; an empty base
URL means the first) is routed over all of them (`model_server_pool`); any other URL is
called as it is.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from harness_app.harness.llm.upstreams import UpstreamPool, replicas_for, shared_pool


class PolicyHostError(ValueError):
    """A policy config whose base URL is not on the allowed hosts."""


class _HasBaseUrl(Protocol):
    @property
    def pk(self) -> Any: ...

    @property
    def base_url(self) -> str: ...


def base_url_refusal(url: str) -> str:
    """Why `url` may not be a policy's base URL, or "" if it may."""
    if not url:
        return ""  # empty means VLLM_BASE_URL, which the deployment chose
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL with a host"
    allowed = [entry.strip().lower() for entry in settings.POLICY_ALLOWED_HOSTS]
    if "*" in allowed:
        return ""
    host = parts.hostname.lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"{url!r} has no valid port"
    if host in allowed or f"{host}:{port}" in allowed:
        return ""
    return (
        f"host {host!r} is not one policies may call; allowed: {', '.join(allowed)} "
        "(POLICY_ALLOWED_HOSTS)"
    )


def validate_policy_base_url(url: str) -> None:
    """The model field's validator."""
    refusal = base_url_refusal(url)
    if refusal:
        raise ValidationError(refusal, code="host_not_allowed")


def policy_base_url(config: _HasBaseUrl) -> str:
    """The URL to call for `config`: its own, if still allowed, or VLLM_BASE_URL."""
    refusal = base_url_refusal(config.base_url)
    if refusal:
        raise PolicyHostError(f"policy config {config.pk}: {refusal}")
    return config.base_url or settings.VLLM_BASE_URL


def service_base_url(config: Any, field: str) -> str:
    """The URL in `config`'s `field` (`verifier_base_url`, `reranker_base_url`), if still
    allowed, or VLLM_BASE_URL when it is empty."""
    url = str(getattr(config, field))
    refusal = base_url_refusal(url)
    if refusal:
        raise PolicyHostError(f"policy config {config.pk}, {field}: {refusal}")
    return url or settings.VLLM_BASE_URL


def model_server_api_key(base_url: str) -> str:
    """VLLM_API_KEY for the configured model server, TEACHER_API_KEY for the configured
    teacher server, "" for any other: a researcher's policy may name its own server, which
    must not receive our keys."""
    url = base_url.rstrip("/")
    if url == settings.VLLM_BASE_URL.rstrip("/") or url in settings.VLLM_BASE_URLS:
        return str(settings.VLLM_API_KEY)
    teacher = str(settings.TEACHER_BASE_URL).rstrip("/")
    if teacher and url == teacher:
        return str(settings.TEACHER_API_KEY)
    return ""


def model_server_urls(base_url: str) -> list[str]:
    """Every replica when `base_url` is one of VLLM_BASE_URLS, else `base_url` alone: where
    calls for it may go and where an adapter for it must be served."""
    return replicas_for(base_url or settings.VLLM_BASE_URL, settings.VLLM_BASE_URLS)


def model_server_pool(base_url: str, *, api_key: str = "") -> UpstreamPool:
    """This process's pool over `model_server_urls(base_url)`."""
    return shared_pool(
        model_server_urls(base_url),
        api_key=api_key,
        cooldown_s=settings.VLLM_REPLICA_COOLDOWN_S,
    )
