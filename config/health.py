"""/healthz: reachability of the database and the Celery broker, and the queues that no
live worker consumes.

It lives beside the Celery app in config/, the top floor, because it reads that app's
connection; the apps below never import config (docs/architecture.md, "Floors").

Each probe runs in a thread of its own and is waited on for at most
HEALTH_CHECK_TIMEOUT_S: a server that accepts the connection and never answers would
otherwise hold the load balancer's probe for minutes. A probe still stuck holds its
thread until its driver gives up; with eight stuck, later probes report "no answer" at
once instead of piling up threads. The public answer names the component
and what kind of failure it was; the driver's own message, which can carry host names
and addresses, goes to the log only.

A queue without a worker is reported ("queues_without_consumers", and the "workers"
check) but does not turn the answer into a 503: the web process is healthy and the load
balancer should keep sending it requests; a monitor alerts on the list instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.celery import app
from harness_app import queues

log = logging.getLogger(__name__)
# Probes waiting at once; daemon threads, so a stuck one never holds up the process's exit.
_probe_slots = threading.BoundedSemaphore(8)


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str
    queues: tuple[str, ...] = ()


class _Down(Exception):
    """A probe's failure, in words fit for the public answer."""

    def __init__(self, detail: str, queues: tuple[str, ...] = ()) -> None:
        super().__init__(detail)
        self.queues = queues


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"
        log.warning("healthz: database: %s: %s", type(exc).__name__, exc)
        raise _Down(f"unreachable ({type(exc).__name__})") from None
    finally:
        connection.close()  # a probe thread keeps no connection between probes
    return connection.vendor


def _broker() -> str:
    timeout = settings.HEALTH_CHECK_TIMEOUT_S
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=timeout)
            return str(conn.transport_cls)
    except Exception as exc:
        log.warning("healthz: broker: %s: %s", type(exc).__name__, exc)
        raise _Down(f"unreachable ({type(exc).__name__})") from None


def _workers() -> str:
    timeout = min(queues.CONSUMERS_TIMEOUT_S, settings.HEALTH_CHECK_TIMEOUT_S / 2)
    try:
        missing = queues.queues_without_consumers(timeout=timeout)
    except Exception as exc:
        log.warning("healthz: workers: %s: %s", type(exc).__name__, exc)
        raise _Down(f"unknown, broker unreachable ({type(exc).__name__})") from None
    if missing:
        raise _Down(f"no live worker consumes {', '.join(missing)}", tuple(missing))
    return "every queue has a live worker"


def _start(probe: Callable[[], str]) -> Future[str]:
    future: Future[str] = Future()
    if not _probe_slots.acquire(blocking=False):
        future.set_exception(_Down("no answer: earlier probes are still waiting"))
        return future

    def run() -> None:
        try:
            future.set_result(probe())
        except BaseException as exc:
            future.set_exception(exc)
        finally:
            _probe_slots.release()

    threading.Thread(target=run, name="healthz", daemon=True).start()
    return future


def run_checks(probes: dict[str, Callable[[], str]], timeout_s: float) -> dict[str, Check]:
    """Every probe at once, each answer awaited until `timeout_s` from now."""
    deadline = time.monotonic() + timeout_s
    futures = {name: _start(probe) for name, probe in probes.items()}
    checks = {}
    for name, future in futures.items():
        try:
            left = max(0.0, deadline - time.monotonic())
            checks[name] = Check(True, future.result(timeout=left))
        except FutureTimeout:
            checks[name] = Check(False, f"no answer within {timeout_s:g} s")
        except _Down as exc:
            checks[name] = Check(False, str(exc), exc.queues)
    return checks


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    probes = {"database": _database, "broker": _broker, "workers": _workers}
    checks = run_checks(probes, settings.HEALTH_CHECK_TIMEOUT_S)
    healthy = checks["database"].ok and checks["broker"].ok
    body = {
        "status": "ok" if healthy else "unavailable",
        "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in checks.items()},
        "queues_without_consumers": list(checks["workers"].queues),
    }
    return JsonResponse(body, status=200 if healthy else 503)
