"""Per-key limits on the recording proxy: calls in flight and calls per minute.

A streamed call holds a web thread for as long as the model generates (up to
PROXY_TIMEOUT_S), so without a cap one key could take every thread of a process and lock
out every other session. Each process counts its own calls: the cap is about that
process's threads, and counting in a shared store would put a round trip on every call's
path (docs/proxy.md). With W web processes a key holds at most W × the cap in all.

Calls per minute are a token bucket per key: a burst of up to the minute's allowance,
then one call each 60 / allowance seconds.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

from django.conf import settings

_MAX_KEYS = 4096  # buckets kept before the idle ones are dropped


class OverLimit(Exception):
    """A call over its key's limits; `retry_after_s` is when one would be admitted."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    @property
    def retry_after(self) -> str:
        """The Retry-After header's value: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))


class Slot:
    """One admitted call; `release` (idempotent) gives its place back."""

    def __init__(self, limits: KeyLimits, session_id: int) -> None:
        self._limits = limits
        self._session_id = session_id
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._limits._release(self._session_id)


class KeyLimits:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}
        self._buckets: dict[int, tuple[float, float]] = {}  # session → (tokens, at)

    def admit(self, session_id: int) -> Slot:
        """A slot for one call of this session, or OverLimit saying which limit and why."""
        most = settings.PROXY_MAX_CONCURRENT_CALLS_PER_KEY
        per_minute = settings.PROXY_MAX_CALLS_PER_MINUTE_PER_KEY
        with self._lock:
            in_flight = self._in_flight.get(session_id, 0)
            if most > 0 and in_flight >= most:
                raise OverLimit(
                    f"recording session {session_id} already has {in_flight} calls in flight "
                    f"here, its limit (PROXY_MAX_CONCURRENT_CALLS_PER_KEY={most})",
                    1.0,
                )
            if per_minute > 0:
                self._take_token(session_id, per_minute)
            self._in_flight[session_id] = in_flight + 1
        return Slot(self, session_id)

    def _take_token(self, session_id: int, per_minute: int) -> None:
        now = time.monotonic()
        rate = per_minute / 60.0
        tokens, at = self._buckets.get(session_id, (float(per_minute), now))
        tokens = min(float(per_minute), tokens + (now - at) * rate)
        if tokens < 1.0:
            self._buckets[session_id] = (tokens, now)
            raise OverLimit(
                f"recording session {session_id} is over its {per_minute} calls a minute "
                "(PROXY_MAX_CALLS_PER_MINUTE_PER_KEY)",
                (1.0 - tokens) / rate,
            )
        if len(self._buckets) >= _MAX_KEYS and session_id not in self._buckets:
            self._buckets = {k: v for k, v in self._buckets.items() if k in self._in_flight}
        self._buckets[session_id] = (tokens - 1.0, now)

    def _release(self, session_id: int) -> None:
        with self._lock:
            left = self._in_flight.get(session_id, 1) - 1
            if left > 0:
                self._in_flight[session_id] = left
            else:
                self._in_flight.pop(session_id, None)


class ReleasedAtClose:
    """A streamed body that gives its call's slot back when the server closes it, whether
    or not it was ever read (a generator never started runs no `finally`); `on_close`
    then settles what the body itself could not."""

    def __init__(
        self, body: Iterator[bytes], slot: Slot, on_close: Callable[[], None] | None = None
    ) -> None:
        self._body = body
        self._slot = slot
        self._on_close = on_close

    def __iter__(self) -> Iterator[bytes]:
        return self._body

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
            if self._on_close is not None:
                self._on_close()
        finally:
            self._slot.release()


key_limits = KeyLimits()
