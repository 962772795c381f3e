"""/healthz: reachability of the database and the Celery broker.

It lives beside the Celery app in config/, the top floor, because it reads that app's
connection; the apps below never import config (docs/architecture.md, "Floors").
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.celery import app


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


def database_check() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"; the detail says which
        return Check(False, f"{type(exc).__name__}: {exc}".strip())
    return Check(True, connection.vendor)


def broker_check() -> Check:
    timeout = settings.HEALTH_CHECK_TIMEOUT_S
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=timeout)
            transport = conn.transport_cls
    except Exception as exc:
        return Check(False, f"{type(exc).__name__}: {exc}".strip())
    return Check(True, str(transport))


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": database_check(), "broker": broker_check()}
    healthy = all(c.ok for c in checks.values())
    body = {
        "status": "ok" if healthy else "unavailable",
        "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in checks.items()},
    }
    return JsonResponse(body, status=200 if healthy else 503)
