"""The caller's JSON body on the recording proxy: read whole, with or without a
Content-Length, within DATA_UPLOAD_MAX_MEMORY_SIZE, and refused past the JSON nesting
limit (harness_app/json_body.py) before it is parsed.

Django reads a body by its Content-Length, so a chunked one (Transfer-Encoding: chunked,
no length) reads as empty. A server that decodes the chunks itself says so with
`wsgi.input_terminated` (gunicorn does): its stream then ends where the body ends and is
read to that end here. A server that does not (runserver) hands over the raw chunk
framing, which is refused with 411 rather than guessed at.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from harness_app.json_body import json_depth_check


class LengthRequired(Exception):
    """A chunked body on a server that cannot read one."""


def proxy_body_json(request: HttpRequest) -> Any:
    """The body parsed; RequestDataTooBig past the size limit, LengthRequired for a chunked
    body this server cannot read, ValueError (JsonTooDeep among them) for one not JSON."""
    raw = _body(request)
    json_depth_check(raw)
    return orjson.loads(raw)


def _body(request: HttpRequest) -> bytes:
    environ = request.META
    chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    if not chunked or environ.get("CONTENT_LENGTH"):
        return request.body
    if not environ.get("wsgi.input_terminated"):
        raise LengthRequired("this server cannot read a chunked body; send a Content-Length")
    most = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    stream = environ["wsgi.input"]
    raw: bytes = stream.read() if most is None else stream.read(most + 1)
    if most is not None and len(raw) > most:
        raise RequestDataTooBig("the request body is too large")
    return raw
