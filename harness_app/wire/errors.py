"""Errors on the wire: a request the proxy refuses, and one error body in each API's shape.

Every error the proxy answers, whole or in the middle of a stream, is shaped by
`error_body`, so an agent's client raises what it would have raised against the real
service: OpenAI's shape for chat completions and Responses, Anthropic's for Messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

# The APIs by the name a recorded call stores (ModelCall.api).
CHAT_API, MESSAGES_API, RESPONSES_API = "chat", "messages", "responses"

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",  # vLLM answers 503 while it cannot take the request
    529: "overloaded_error",
}


class ProtocolError(ValueError):
    """A request the proxy will not forward; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def error_body(
    api: str, status: int, message: str, kind: str, param: str | None = None
) -> dict[str, Any]:
    """The error body `api` answers with for an HTTP status.

    OpenAI's APIs carry the kind and the offending field; Anthropic's takes its type from
    the status (unlisted 4xx are invalid requests, unlisted 5xx api errors) and has no
    field for the parameter, so it is named in the message.
    """
    if api == MESSAGES_API:
        where = f" ({param})" if param else ""
        default = "api_error" if status >= 500 else "invalid_request_error"
        anthropic_kind = _ANTHROPIC_TYPES.get(status) or default
        return {"type": "error", "error": {"type": anthropic_kind, "message": message + where}}
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def upstream_message(status: int, content: bytes) -> str:
    """The message of an upstream's error body (vLLM's OpenAI-shaped one, or anything
    else), to be said again in another API's shape."""
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        body = None
    if message := error_message(body):
        return message
    text = content.decode(errors="replace").strip()
    return text[:2000] if text else f"the model server answered HTTP {status}"


def error_message(body: Any) -> str:
    """The message of {"error": {"message": ...}}, of vLLM's older {"object": "error",
    "message": ...}, or of {"error": "..."}; "" when there is none."""
    while isinstance(body, Mapping):
        if isinstance(body.get("message"), str):
            return str(body["message"])
        body = body.get("error")
    return body if isinstance(body, str) else ""
