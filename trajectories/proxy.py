"""The recording proxy: /proxy/<session key>/v1/chat/completions and /v1/models.

An outside agent points its OpenAI client at the session's base_url. Each chat call is
forwarded to the one upstream in settings (PROXY_UPSTREAM_URL): nothing in the request
(path, query, headers, body) can name another host, and none of the caller's headers is
forwarded. The request gains `return_token_ids` and `logprobs`; the answer loses them
again unless the caller asked (harness_app/harness/llm/proxy_protocol.py), and is
otherwise passed through as the upstream sent it, streamed or not. Every call, whole or
aborted, is recorded under the session (trajectories/services/recording.py).

The key in the path is the credential, so these views need no login and no CSRF token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import urllib3
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from harness_app.harness.llm.proxy_protocol import (
    Asked,
    CallTokensFound,
    ProtocolError,
    StreamFold,
    agent_fingerprint,
    needs_stripping,
    sse_data,
    sse_events,
    strip_added,
    tokens_of,
    upstream_request,
)
from trajectories.models import RecordingSession
from trajectories.services.recording import (
    RecordedCall,
    SessionKeyError,
    recorded_call_save,
    recording_session_authenticate,
)

log = logging.getLogger(__name__)
_pool_lock = threading.Lock()
_pool: urllib3.PoolManager | None = None
# What a failed upstream call can raise: urllib3's own errors, and socket errors that
# escape it while a stream is being read.
UpstreamError = (urllib3.exceptions.HTTPError, OSError)


def upstream_pool() -> urllib3.PoolManager:
    """One connection pool per process, kept alive between calls.

    urllib3 rather than httpx on this path: a call with 8,000 prompt ids costs 0.2-0.6 ms
    less (docs/proxy.md), and every microsecond here is added to the agent's wait. No
    retries (a retried chat call would sample twice) and no proxy variables (they could
    redirect the upstream).
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = urllib3.PoolManager(maxsize=64, retries=False)
        return _pool


def _upstream_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    # The proxy's own credential for the upstream, if any; never the caller's headers.
    sent = dict(headers or {})
    if settings.PROXY_UPSTREAM_API_KEY:
        sent["authorization"] = f"Bearer {settings.PROXY_UPSTREAM_API_KEY}"
    return sent


def _timeout() -> urllib3.Timeout:
    # Read per call, so a changed PROXY_TIMEOUT_S applies without a new pool.
    return urllib3.Timeout(connect=10.0, read=settings.PROXY_TIMEOUT_S)


def _error(status: int, message: str, kind: str, param: str | None = None) -> JsonResponse:
    # The OpenAI error shape, so the agent's client raises a readable exception.
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JsonResponse(body, status=status)


def _session_or_error(key: str) -> RecordingSession | JsonResponse:
    try:
        return recording_session_authenticate(key=key)
    except SessionKeyError as exc:
        return _error(exc.status, str(exc), "invalid_session_key")


@csrf_exempt
@login_not_required
@require_GET
def proxy_models(request: HttpRequest, key: str) -> HttpResponse:
    session = _session_or_error(key)
    if isinstance(session, JsonResponse):
        return session
    try:
        upstream = upstream_pool().request(
            "GET",
            f"{settings.PROXY_UPSTREAM_URL}/models",
            headers=_upstream_headers(),
            timeout=_timeout(),
        )
    except UpstreamError as exc:
        return _error(502, f"the model server is unreachable: {exc}", "upstream_unreachable")
    return _passthrough(upstream.data, upstream)


@csrf_exempt
@login_not_required
@require_POST
def proxy_chat_completions(request: HttpRequest, key: str) -> HttpResponseBase:
    session = _session_or_error(key)
    if isinstance(session, JsonResponse):
        return session
    try:
        body = orjson.loads(request.body)
        forwarded, asked = upstream_request(body)
    except RequestDataTooBig:
        return _error(413, "the request body is too large", "invalid_request_error")
    except (ValueError, UnicodeDecodeError) as exc:
        param = exc.param if isinstance(exc, ProtocolError) else None
        return _error(400, f"not a chat completion request: {exc}", "invalid_request_error", param)
    call = _Call(session=session, request=body, forwarded=forwarded, asked=asked)
    if asked.stream:
        return call.streamed()
    return call.whole()


class _Call:
    """One proxied call: forwards it, answers the caller, records it exactly once."""

    def __init__(
        self,
        *,
        session: RecordingSession,
        request: dict[str, Any],
        forwarded: dict[str, Any],
        asked: Asked,
    ) -> None:
        self.session = session
        self.request = request
        self.forwarded = forwarded
        self.asked = asked
        self.agent = agent_fingerprint(request.get("messages"))
        self.started = time.perf_counter()
        self.recorded = False

    def _send(self, *, stream: bool) -> urllib3.BaseHTTPResponse:
        return upstream_pool().request(
            "POST",
            f"{settings.PROXY_UPSTREAM_URL}/chat/completions",
            body=orjson.dumps(self.forwarded),
            headers=_upstream_headers(
                {
                    "content-type": "application/json",
                    "accept": "text/event-stream" if stream else "application/json",
                }
            ),
            preload_content=not stream,
            timeout=_timeout(),
        )

    def whole(self) -> HttpResponse:
        try:
            upstream = self._send(stream=False)
        except UpstreamError as exc:
            return self._unreachable(exc)
        if upstream.status != 200:
            self._record_refused(upstream.status, upstream.data.decode(errors="replace"))
            return _passthrough(upstream.data, upstream)
        try:
            payload = orjson.loads(upstream.data)
        except ValueError:
            self._record({}, error="model_bad_response: not JSON", aborted=True)
            return _passthrough(upstream.data, upstream)
        self._record_response(payload)
        if not needs_stripping(self.asked):
            return _passthrough(upstream.data, upstream)
        stripped = orjson.dumps(strip_added(payload, self.asked))
        return HttpResponse(stripped, content_type="application/json")

    def streamed(self) -> HttpResponseBase:
        try:
            upstream = self._send(stream=True)
        except UpstreamError as exc:
            return self._unreachable(exc)
        if upstream.status != 200:
            content = upstream.read()
            upstream.release_conn()
            self._record_refused(upstream.status, content.decode(errors="replace"))
            return _passthrough(content, upstream)
        response = StreamingHttpResponse(
            self._relay(upstream), content_type=upstream.headers.get("content-type")
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # let nginx pass events on as they come
        return response

    def _relay(self, upstream: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
        fold = StreamFold()
        problem = "stream_broken: the stream ended before [DONE]"
        buffer = b""
        try:
            for piece in _pieces(upstream):
                events, buffer = sse_events(buffer + piece)
                yield from self._relay_events(events, fold)
            if buffer.strip():
                yield from self._relay_events([buffer], fold)
            if fold.done:
                problem = ""
        except UpstreamError as exc:
            problem = f"stream_broken: {exc}"
        except GeneratorExit:
            problem = "client_disconnected: the caller closed the stream"
            raise
        finally:
            if problem:
                # Closing, not draining: a caller that hung up would otherwise wait out the
                # rest of the generation here; vLLM aborts a request whose client is gone.
                upstream.close()
            upstream.release_conn()
            if not self.recorded:
                self._record(fold.response(), error=problem, aborted=True)

    def _relay_events(self, events: list[bytes], fold: StreamFold) -> Iterator[bytes]:
        for event in events:
            relayed = self._event(event, fold) + b"\n\n"
            if fold.done and not self.recorded:
                # Stored before the agent reads [DONE], as a whole call is stored before
                # its answer leaves: an agent (or a researcher closing the session) that
                # goes on at [DONE] finds the call there.
                self._record_response(fold.response())
            yield relayed

    def _event(self, event: bytes, fold: StreamFold) -> bytes:
        data = sse_data(event)
        if data is None:
            return event
        if data.strip() == b"[DONE]":
            fold.done = True
            return event
        try:
            chunk = orjson.loads(data)
        except ValueError:
            return event
        fold.feed(chunk)
        if not needs_stripping(self.asked) or not isinstance(chunk, dict):
            return event
        return b"data: " + orjson.dumps(strip_added(chunk, self.asked))

    def _unreachable(self, exc: Exception) -> JsonResponse:
        # urllib3 counts a refused connection as a kind of connect timeout; it is not one.
        timed_out = isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
            exc, urllib3.exceptions.NewConnectionError
        )
        reason = "model_timeout" if timed_out else "upstream_unreachable"
        message = f"{reason}: {type(exc).__name__}: {exc}"
        self._record({}, error=message, aborted=True)
        return _error(502, f"the model server did not answer ({message})", reason)

    def _record_refused(self, status: int, text: str) -> None:
        # The server refused the request (e.g. a context too long): the agent sees the
        # refusal and goes on, so the trajectory stays faithful; only a call that started
        # and did not finish (5xx, broken stream) is aborted.
        self._record({}, error=f"upstream_{status}: {text[:500]}", aborted=status >= 500)

    def _record_response(self, payload: dict[str, Any]) -> None:
        found = tokens_of(payload)
        self._record(
            _without_token_ids(payload),
            error=found.problem,
            aborted=bool(found.problem),
            tokens=found,
        )

    def _record(
        self,
        payload: dict[str, Any],
        *,
        error: str,
        aborted: bool,
        tokens: CallTokensFound | None = None,
    ) -> None:
        self.recorded = True
        total_ms = (time.perf_counter() - self.started) * 1000
        version = str(payload.get("model") or self.request.get("model") or "")
        try:
            recorded_call_save(
                session=self.session,
                call=RecordedCall(
                    request=self.request,
                    response=payload,
                    prompt_ids=tokens.prompt_ids if tokens else [],
                    completion_ids=tokens.completion_ids if tokens else [],
                    logprobs=tokens.logprobs if tokens else [],
                    agent=self.agent,
                    policy_version=version,
                    latency_ms=total_ms,
                    error=error,
                    aborted=aborted,
                ),
            )
        except Exception:
            # The agent still gets its answer; the lost record shows in the log.
            log.exception("could not record a call of recording session %s", self.session.pk)


def _without_token_ids(payload: dict[str, Any]) -> dict[str, Any]:
    # The ids are stored once, as int32 blobs; as JSON they would double the row.
    stored = {k: v for k, v in payload.items() if k != "prompt_token_ids"}
    stored["choices"] = [
        {k: v for k, v in choice.items() if k != "token_ids"}
        if isinstance(choice, dict)
        else choice
        for choice in payload.get("choices") or []
    ]
    return stored


def _passthrough(content: bytes, upstream: urllib3.BaseHTTPResponse) -> HttpResponse:
    return HttpResponse(
        content,
        status=upstream.status,
        content_type=upstream.headers.get("content-type", "application/json"),
    )


def _pieces(upstream: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The body as it arrives, whether chunked (vLLM) or ended by closing the connection:
    `read1` returns what one read gives instead of waiting to fill its buffer."""
    while piece := upstream.read1(64 * 1024):
        yield piece
