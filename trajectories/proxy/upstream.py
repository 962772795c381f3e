"""The recording proxy's upstream: which replica a call goes to, and how it is reached.

The upstream comes from settings only (PROXY_UPSTREAM_URL, or the least busy of the
PROXY_UPSTREAM_URLS replicas: harness_app/harness/llm/upstreams.py), never from a
request, so a session key cannot turn the server into an open relay.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import urllib3
from django.conf import settings

from harness_app.harness.llm.upstreams import Lease, NoReplicaError, replicas_for, shared_pool

_pool_lock = threading.Lock()
_pool: urllib3.PoolManager | None = None
# What a failed upstream call can raise: urllib3's own errors, socket errors that escape
# it while a stream is being read, and every replica being down.
UpstreamError = (urllib3.exceptions.HTTPError, OSError, NoReplicaError)


def upstream_lease() -> Lease:
    """A replica for one call: PROXY_UPSTREAM_URL, or when it is one of the
    PROXY_UPSTREAM_URLS, the one of those with the fewest calls in flight here."""
    urls = replicas_for(settings.PROXY_UPSTREAM_URL, settings.PROXY_UPSTREAM_URLS)
    key = settings.PROXY_UPSTREAM_API_KEY
    pool = shared_pool(urls, api_key=key, cooldown_s=settings.VLLM_REPLICA_COOLDOWN_S)
    return pool.acquire()


def upstream_pool() -> urllib3.PoolManager:
    """One connection pool per process, kept alive between calls.

    urllib3 rather than httpx on this path: a call with 8,000 prompt ids costs 0.2-0.6 ms
    less (docs/proxy.md), and every microsecond here is added to the agent's wait. No
    retries (a retried chat call would sample twice) and no proxy variables (they could
    redirect the upstream).
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = urllib3.PoolManager(maxsize=64, retries=False)
        return _pool


_context_lock = threading.Lock()
_context: dict[str, tuple[float, int | None]] = {}  # upstream URL → (asked at, length)
CONTEXT_LEN_TTL_S = 300.0


def upstream_context_len() -> int | None:
    """The upstream's context length (vLLM's max_model_len in /v1/models), for the clamp.

    Asked only when a call wants more tokens than its session's own ceiling allows, then
    kept five minutes; None when the upstream does not say.
    """
    url = settings.PROXY_UPSTREAM_URL
    with _context_lock:
        asked_at, length = _context.get(url, (-CONTEXT_LEN_TTL_S, None))
        if time.monotonic() - asked_at < CONTEXT_LEN_TTL_S:
            return length
        try:
            answer = upstream_pool().request(
                "GET", f"{url}/models", headers=upstream_headers(), timeout=upstream_timeout()
            )
            models = orjson.loads(answer.data).get("data") or []
            lengths = [
                m["max_model_len"] for m in models if isinstance(m.get("max_model_len"), int)
            ]
            length = min(lengths) if lengths else None
        except (*UpstreamError, ValueError, AttributeError, TypeError):
            length = None
        _context[url] = (time.monotonic(), length)
        return length


def upstream_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    # The proxy's own credential for the upstream, if any; never the caller's headers.
    sent = dict(headers or {})
    if settings.PROXY_UPSTREAM_API_KEY:
        sent["authorization"] = f"Bearer {settings.PROXY_UPSTREAM_API_KEY}"
    return sent


def upstream_timeout() -> urllib3.Timeout:
    # Read per call, so a changed PROXY_TIMEOUT_S applies without a new pool.
    return urllib3.Timeout(connect=10.0, read=settings.PROXY_TIMEOUT_S)


@contextmanager
def released(lease: Lease) -> Iterator[None]:
    """A one-request call's replica: marked down when it does not answer, freed after."""
    try:
        yield
    except UpstreamError as exc:
        lease.fail(f"unreachable: {exc}")
        raise
    finally:
        lease.release()
