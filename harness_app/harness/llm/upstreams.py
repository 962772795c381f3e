"""Several vLLM replicas behind one name: least-outstanding routing and health checks.

A pool holds the base URLs of replicas that serve the same model (and the same adapters).
Each call leases one: the replica with the fewest calls this process has in flight on it,
ties taken in turn, so a burst spreads evenly and a slow replica gets fewer new calls. The
counts are per process (a worker's threads share them; two workers do not), which is what
a rollout worker or a web process can see without asking anyone.

A replica whose call failed to connect or answered 5xx is marked down for `cooldown_s`;
after that, the next pick probes it (GET /v1/models with a short timeout) and takes it back
if it answers. When every replica is down the pick raises `NoReplicaError` naming them all.
A pool of one replica never marks it down: there is nothing to route around, and its
callers' own retries and errors stay as they were.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

DEFAULT_COOLDOWN_S = 10.0
DEFAULT_PROBE_TIMEOUT_S = 2.0

Probe = Callable[[str], bool]


class NoReplicaError(RuntimeError):
    """Every replica of a pool is down; the message names each and why."""


def replica_url_problem(url: str) -> str:
    """Why `url` cannot be a replica's base URL, or "" if it can."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http(s) URL with a host"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "has no valid port"
    return ""


def replica_urls_parse(raw: str, *, name: str) -> list[str]:
    """A comma-separated list of base URLs, checked; the error names the bad entry."""
    urls = [item.strip().rstrip("/") for item in raw.split(",") if item.strip()]
    if not urls:
        raise ValueError(f"{name} names no URL")
    for n, url in enumerate(urls, start=1):
        problem = replica_url_problem(url)
        if problem:
            raise ValueError(f"{name} entry {n} ({url!r}) {problem}")
    repeated = sorted({url for url in urls if urls.count(url) > 1})
    if repeated:
        raise ValueError(f"{name} names {repeated[0]!r} twice")
    return urls


def replicas_for(url: str, replicas: Sequence[str]) -> list[str]:
    """The URLs to route a call for `url` over: all the replicas when `url` is one of them,
    else `url` alone (a server of its own, called as it is)."""
    wanted = url.rstrip("/")
    known = [r.rstrip("/") for r in replicas]
    return known if wanted in known else [wanted]


def models_probe(timeout_s: float = DEFAULT_PROBE_TIMEOUT_S, api_key: str = "") -> Probe:
    """A probe that asks GET {url}/models and takes any 200 as alive."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def probe(url: str) -> bool:
        try:
            return httpx.get(f"{url}/models", timeout=timeout_s, headers=headers).is_success
        except httpx.HTTPError:
            return False

    return probe


@dataclass
class _Replica:
    url: str
    outstanding: int = 0
    down_until: float | None = None  # None: up
    reason: str = ""
    probing: bool = False


@dataclass(frozen=True)
class ReplicaStatus:
    url: str
    up: bool
    outstanding: int
    reason: str


class Lease:
    """One call's hold on a replica: `release` when the call is over, `fail` first when the
    replica failed it (no connection, a 5xx)."""

    def __init__(self, pool: UpstreamPool, replica: _Replica) -> None:
        self._pool = pool
        self._replica = replica
        self._released = False

    @property
    def url(self) -> str:
        return self._replica.url

    def fail(self, reason: str) -> None:
        self._pool._mark_down(self._replica, reason)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._pool._release(self._replica)


class UpstreamPool:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        probe: Probe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not urls:
            raise ValueError("an upstream pool needs at least one URL")
        self._replicas = [_Replica(url.rstrip("/")) for url in urls]
        self.cooldown_s = cooldown_s
        self._probe = probe or models_probe()
        self._clock = clock
        self._lock = threading.Lock()
        self._turn = 0  # where the next tie-break starts

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self._replicas]

    def status(self) -> list[ReplicaStatus]:
        with self._lock:
            return [
                ReplicaStatus(r.url, r.down_until is None, r.outstanding, r.reason)
                for r in self._replicas
            ]

    def acquire(self) -> Lease:
        """Lease the up replica with the fewest calls in flight (ties in turn)."""
        self._probe_due()
        with self._lock:
            up = [i for i, r in enumerate(self._replicas) if r.down_until is None]
            if not up:
                raise NoReplicaError(self._all_down_message())
            fewest = min(self._replicas[i].outstanding for i in up)
            tied = [i for i in up if self._replicas[i].outstanding == fewest]
            n = len(self._replicas)
            chosen = min(tied, key=lambda i: (i - self._turn) % n)
            self._turn = (chosen + 1) % n
            replica = self._replicas[chosen]
            replica.outstanding += 1
            return Lease(self, replica)

    @contextmanager
    def lease(self) -> Iterator[Lease]:
        leased = self.acquire()
        try:
            yield leased
        finally:
            leased.release()

    def mark_down(self, url: str, reason: str) -> None:
        for replica in self._replicas:
            if replica.url == url.rstrip("/"):
                self._mark_down(replica, reason)

    def _mark_down(self, replica: _Replica, reason: str) -> None:
        if len(self._replicas) == 1:
            return
        with self._lock:
            replica.down_until = self._clock() + self.cooldown_s
            replica.reason = reason

    def _release(self, replica: _Replica) -> None:
        with self._lock:
            replica.outstanding -= 1

    def _probe_due(self) -> None:
        """Probe each down replica whose cool-down is over, outside the lock; one caller
        probes a replica at a time, the others pick among the rest meanwhile."""
        now = self._clock()
        with self._lock:
            due = [
                r
                for r in self._replicas
                if r.down_until is not None and r.down_until <= now and not r.probing
            ]
            for replica in due:
                replica.probing = True
        for replica in due:
            alive = self._probe(replica.url)
            with self._lock:
                replica.probing = False
                if alive:
                    replica.down_until, replica.reason = None, ""
                else:
                    replica.down_until = self._clock() + self.cooldown_s

    def _all_down_message(self) -> str:
        listed = "; ".join(f"{r.url}: {r.reason or 'down'}" for r in self._replicas)
        return f"every model server replica is down ({listed})"


_pools: dict[tuple[str, ...], UpstreamPool] = {}
_pools_lock = threading.Lock()


def shared_pool(
    urls: Iterable[str],
    *,
    api_key: str = "",
    cooldown_s: float = DEFAULT_COOLDOWN_S,
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
) -> UpstreamPool:
    """This process's one pool for these URLs, so every caller shares its counts."""
    key = tuple(url.rstrip("/") for url in urls)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            probe = models_probe(probe_timeout_s, api_key)
            pool = _pools[key] = UpstreamPool(key, cooldown_s=cooldown_s, probe=probe)
        return pool


def shared_pools_forget() -> None:
    """Drop every shared pool (tests; a settings change)."""
    with _pools_lock:
        _pools.clear()
