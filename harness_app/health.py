"""Reachability checks for /healthz: the database and the Celery broker."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection


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
    from config.celery import app

    timeout = settings.HEALTH_CHECK_TIMEOUT_S
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=timeout)
            transport = conn.transport_cls
    except Exception as exc:
        return Check(False, f"{type(exc).__name__}: {exc}".strip())
    return Check(True, str(transport))
