from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from harness_app import health
from harness_app.roles import browse_required


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": health.database_check(), "broker": health.broker_check()}
    healthy = all(c.ok for c in checks.values())
    body = {
        "status": "ok" if healthy else "unavailable",
        "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in checks.items()},
    }
    return JsonResponse(body, status=200 if healthy else 503)


@browse_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "harness_app/dashboard.html", {})
