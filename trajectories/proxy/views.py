"""The recording proxy: /proxy/<session key>/v1/chat/completions, messages, responses, models.

An outside agent points its client at the session's base_url. Each call is forwarded to
an upstream in settings (PROXY_UPSTREAM_URL, or the least busy of the PROXY_UPSTREAM_URLS
replicas; a stream stays on one): nothing in the request (path, query, headers, body) can
name another host, and none of the caller's headers is forwarded. The request gains
`return_token_ids` and `logprobs`; the answer loses them again unless the caller asked
(harness_app/wire/chat.py), and goes back in the caller's API (harness_app/wire/dialects.py),
streamed or not. Every call, whole or aborted, is recorded under the session (calls.py).

The key in the path is the credential, so these views need no login and no CSRF token.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

import orjson
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from harness_app.wire.chat import upstream_request
from harness_app.wire.dialects import CHAT, MESSAGES, RESPONSES, Answer, Dialect
from harness_app.wire.errors import ProtocolError
from harness_app.wire.sampling import sampling_overrides_parse
from trajectories.models import RecordingSession
from trajectories.proxy.body import LengthRequired, proxy_body_json
from trajectories.proxy.calls import ProxiedCall, answered
from trajectories.proxy.limits import OverLimit, Slot, key_limits
from trajectories.proxy.upstream import (
    UpstreamError,
    released,
    upstream_context_len,
    upstream_headers,
    upstream_lease,
    upstream_pool,
    upstream_timeout,
)
from trajectories.services.recording import SessionKeyError, recording_session_authenticate

log = logging.getLogger(__name__)
View = TypeVar("View", bound=Callable[[HttpRequest, str], HttpResponseBase])


class Refused(Exception):
    """A call answered before it reaches the upstream: the answer says why."""

    def __init__(self, answer: HttpResponse) -> None:
        self.answer = answer


def _session(key: str, dialect: Dialect) -> RecordingSession:
    try:
        return recording_session_authenticate(key=key)
    except SessionKeyError as exc:
        refusal = dialect.error(exc.status, str(exc), "invalid_session_key")
        raise Refused(answered(refusal)) from exc
    except DatabaseError as exc:
        # The short path (config/wsgi.py) has no error pages: this would be the site's
        # HTML 500. A 503 with Retry-After is one the agents' clients wait out and retry.
        log.warning("the proxy could not look a session up: %s", exc)
        message = "the recording database is unreachable; the call was not made, retry it"
        response = answered(dialect.error(503, message, "service_unavailable"))
        response["Retry-After"] = "5"
        raise Refused(response) from exc


def _caller_json(request: HttpRequest, dialect: Dialect) -> Any:
    """The caller's body parsed (body.py), or Refused in its API's shape."""
    try:
        return proxy_body_json(request)
    except RequestDataTooBig:
        refusal = dialect.error(413, "the request body is too large", "invalid_request_error")
    except LengthRequired as exc:
        refusal = dialect.error(411, str(exc), "invalid_request_error")
    except (ValueError, UnicodeDecodeError) as exc:
        refusal = _not_understood(dialect, exc)
    raise Refused(answered(refusal))


def _not_understood(dialect: Dialect, exc: ValueError | UnicodeDecodeError) -> Answer:
    param = exc.param if isinstance(exc, ProtocolError) else None
    return dialect.error(400, f"not {dialect.what}: {exc}", "invalid_request_error", param)


def _refusals_answered(view: View) -> View:
    """The view, answering a call it Refused with the refusal."""

    @functools.wraps(view)
    def answering(request: HttpRequest, key: str) -> HttpResponseBase:
        try:
            return view(request, key)
        except Refused as refused:
            return refused.answer

    return cast(View, answering)


def proxy_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A path under /proxy/ that names no endpoint, answered as an API would (config/wsgi.py)."""
    return answered(CHAT.error(404, f"no proxy endpoint at {request.path}", "not_found"))


def proxy_server_error(request: HttpRequest) -> HttpResponse:
    """A crash on the short path (config/wsgi.py), answered as an API would, not as a page."""
    message = "the proxy failed; the error is in the server's log"
    return answered(CHAT.error(500, message, "api_error"))


@csrf_exempt
@login_not_required
@require_GET
@_refusals_answered
def proxy_models(request: HttpRequest, key: str) -> HttpResponse:
    _session(key, CHAT)
    try:
        lease = upstream_lease()
        with released(lease):
            upstream = upstream_pool().request(
                "GET", f"{lease.url}/models", headers=upstream_headers(), timeout=upstream_timeout()
            )
    except UpstreamError as exc:
        message = f"the model server is unreachable: {exc}"
        return answered(CHAT.error(502, message, "upstream_unreachable"))
    content_type = upstream.headers.get("content-type", "application/json")
    return answered(Answer(upstream.status, upstream.data, content_type))


@csrf_exempt
@login_not_required
@require_POST
@_refusals_answered
def proxy_chat_completions(request: HttpRequest, key: str) -> HttpResponseBase:
    return _proxied(request, key, CHAT)


@csrf_exempt
@login_not_required
@require_POST
@_refusals_answered
def proxy_messages(request: HttpRequest, key: str) -> HttpResponseBase:
    """Anthropic's Messages API (Claude Code), recorded as the chat call it becomes."""
    return _proxied(request, key, MESSAGES)


@csrf_exempt
@login_not_required
@require_POST
@_refusals_answered
def proxy_responses(request: HttpRequest, key: str) -> HttpResponseBase:
    """OpenAI's Responses API (Codex), recorded as the chat call it becomes."""
    return _proxied(request, key, RESPONSES)


@csrf_exempt
@login_not_required
@require_POST
@_refusals_answered
def proxy_count_tokens(request: HttpRequest, key: str) -> HttpResponse:
    """Anthropic's token count, by vLLM's /tokenize of the translated request: the count
    is of the prompt the served chat template renders, as the model will see it."""
    session = _session(key, MESSAGES)
    slot = _admitted(session, MESSAGES)
    try:
        return _count_tokens(request, session)
    finally:
        slot.release()


def _count_tokens(request: HttpRequest, session: RecordingSession) -> HttpResponse:
    caller = _caller_json(request, MESSAGES)
    try:
        if isinstance(caller, dict):
            caller = {**caller, "max_tokens": 1}  # the count request has none
        chat = MESSAGES.to_chat(caller)
        sampling_overrides_parse(session.sampling).apply(chat, context_len=None)
    except (ValueError, UnicodeDecodeError) as exc:
        return answered(_not_understood(MESSAGES, exc))
    asked = {k: chat[k] for k in ("model", "messages", "tools") if k in chat}
    try:
        lease = upstream_lease()
        with released(lease):
            upstream = upstream_pool().request(
                "POST",
                f"{lease.url.removesuffix('/v1')}/tokenize",
                body=orjson.dumps({**asked, "add_generation_prompt": True}),
                headers=upstream_headers({"content-type": "application/json"}),
                timeout=upstream_timeout(),
            )
    except UpstreamError as exc:
        return answered(MESSAGES.error(502, f"the model server is unreachable: {exc}", "api_error"))
    if upstream.status != 200:
        return answered(MESSAGES.refused(upstream.status, upstream.data, "application/json"))
    count = orjson.loads(upstream.data).get("count")
    return JsonResponse({"input_tokens": count})


def _proxied(request: HttpRequest, key: str, dialect: Dialect) -> HttpResponseBase:
    session = _session(key, dialect)
    caller = _caller_json(request, dialect)
    try:
        chat = dialect.to_chat(caller)
        overrides = sampling_overrides_parse(session.sampling)
        overrides.apply(chat, context_len=upstream_context_len)
        forwarded, asked = upstream_request(chat)
    except (ValueError, UnicodeDecodeError) as exc:
        return answered(_not_understood(dialect, exc))
    slot = _admitted(session, dialect)
    call = ProxiedCall(
        session=session,
        dialect=dialect,
        caller=caller,
        request=chat,
        forwarded=forwarded,
        asked=asked,
        slot=slot,
    )
    streaming = False
    try:
        response = call.streamed() if asked.stream else call.whole()
        # A stream gives the slot back when the server closes it (ReleasedAtClose).
        streaming = isinstance(response, StreamingHttpResponse)
        return response
    finally:
        if not streaming:
            slot.release()


def _admitted(session: RecordingSession, dialect: Dialect) -> Slot:
    try:
        return key_limits.admit(session.pk)
    except OverLimit as exc:
        # 429 with Retry-After, as the OpenAI and Anthropic APIs answer a rate limit; their
        # clients wait and retry on their own.
        response = answered(dialect.error(429, str(exc), "rate_limit_exceeded"))
        response["Retry-After"] = exc.retry_after
        raise Refused(response) from exc
