"""The WSGI entry gunicorn serves: the site, and the recording proxy's calls on a short path.

An agent behind the proxy waits on every call, and the site's middleware (sessions, CSRF,
login, messages, security headers) does nothing for a JSON API whose credential is the key
in its path, yet costs each call its share of the latency the proxy adds (docs/proxy.md).
So a path under /proxy/ goes to a handler with no middleware, resolved against the
proxy's routes alone; the Host header is still checked against ALLOWED_HOSTS. The same
views stay in the site's URLconf too (runserver and the test client go through there).
"""

import gc
import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest
from django.http.response import HttpResponseBase

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
site = get_wsgi_application()  # sets Django up before the handler below is built

PROXY_PREFIX = "/proxy/"
PROXY_URLCONF = "trajectories.proxy.urls"


class ProxyHandler(WSGIHandler):
    """Django's WSGI handler with an empty middleware chain and the proxy's URLconf."""

    def load_middleware(self, is_async: bool = False) -> None:
        # What BaseHandler.load_middleware leaves behind for an empty MIDDLEWARE list.
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        self._middleware_chain = convert_exception_to_response(self._checked)

    def _checked(self, request: HttpRequest) -> HttpResponseBase:
        request.get_host()  # DisallowedHost → 400, as CommonMiddleware would
        request.urlconf = PROXY_URLCONF  # type: ignore[attr-defined]  # Django reads it
        return self._get_response(request)  # type: ignore[attr-defined]  # not in the stubs


proxy = ProxyHandler()

# What start-up loaded (modules, URL patterns, settings, the apps) is frozen: a collection
# during a request then walks only what requests made, not all of it (docs/proxy.md).
gc.collect()
gc.freeze()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO", "").startswith(PROXY_PREFIX):
        return proxy(environ, start_response)
    return site(environ, start_response)
