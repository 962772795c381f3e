"""The site's error views: JSON under /api/ (and /proxy/), pages everywhere else.

An API client parses what it gets; an HTML error page, for an unknown path, an oversized
body (Django refuses it before any view runs) or a crash, would reach it as a JSON
decoding error with the real reason lost. The pages are Django's own views with the
project's templates.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from trajectories.proxy.views import proxy_not_found

_JSON_PREFIXES = ("/api/", "/proxy/")


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(_JSON_PREFIXES)


def _json(status: int, message: str) -> JsonResponse:
    # DRF's shape ({"detail": ...}), which every /api/ client already reads.
    return JsonResponse({"detail": message}, status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _wants_json(request):
        reason = str(exception) or "bad request"
        return _json(400, reason)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _wants_json(request):
        return _json(403, str(exception) or "you may not do this")
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/proxy/"):
        return proxy_not_found(request, exception)  # in the OpenAI shape agents read
    if _wants_json(request):
        return _json(404, f"nothing at {request.path}")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _wants_json(request):
        return _json(500, "the server failed; the error is in its log")
    return defaults.server_error(request)
