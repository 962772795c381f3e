"""The recording proxy: /proxy/<session key>/v1/chat/completions and /v1/models.

An outside agent points its OpenAI client at the session's base_url. Each chat call is
forwarded to an upstream in settings (PROXY_UPSTREAM_URL, or the least busy of the
PROXY_UPSTREAM_URLS replicas; a stream stays on one): nothing in the request
(path, query, headers, body) can name another host, and none of the caller's headers is
forwarded. The request gains `return_token_ids` and `logprobs`; the answer loses them
again unless the caller asked (harness_app/harness/llm/proxy_protocol.py), and is
otherwise passed through as the upstream sent it, streamed or not. Every call, whole or
aborted, is recorded under the session (trajectories/services/recording.py).

The key in the path is the credential, so these views need no login and no CSRF token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import orjson
import urllib3
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from harness_app.harness.llm.proxy_protocol import (
    Asked,
    CallTokensFound,
    ProtocolError,
    SseSplitter,
    StreamFold,
    agent_fingerprint,
    cut_prompt_ids,
    needs_stripping,
    sse_data,
    strip_added,
    tokens_of,
    upstream_request,
)
from harness_app.harness.llm.sampling_overrides import sampling_overrides_parse
from trajectories.models import RecordingSession
from trajectories.proxy_body import LengthRequired, proxy_body_json
from trajectories.proxy_dialects import CHAT, MESSAGES, RESPONSES, Dialect, StreamTranslator
from trajectories.proxy_limits import OverLimit, ReleasedAtClose, Slot, key_limits
from trajectories.proxy_upstream import (
    UpstreamError,
    released,
    upstream_context_len,
    upstream_headers,
    upstream_lease,
    upstream_pool,
    upstream_timeout,
)
from trajectories.services.recording import (
    RecordedCall,
    SessionKeyError,
    recorded_call_save,
    recording_session_authenticate,
)

log = logging.getLogger(__name__)


def _error(status: int, message: str, kind: str, param: str | None = None) -> JsonResponse:
    # The OpenAI error shape, so the agent's client raises a readable exception.
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JsonResponse(body, status=status)


def _session_or_error(key: str, dialect: Dialect) -> RecordingSession | JsonResponse:
    try:
        return recording_session_authenticate(key=key)
    except SessionKeyError as exc:
        return dialect.error(exc.status, str(exc), "invalid_session_key")
    except DatabaseError as exc:
        # The short path (config/wsgi.py) has no error pages: this would be the site's
        # HTML 500. A 503 with Retry-After is one the agents' clients wait out and retry.
        log.warning("the proxy could not look a session up: %s", exc)
        message = "the recording database is unreachable; the call was not made, retry it"
        response = dialect.error(503, message, "service_unavailable")
        response["Retry-After"] = "5"
        return response


def _caller_json(request: HttpRequest, dialect: Dialect) -> Any:
    """The caller's body parsed, or the refusal in its API's shape (proxy_body.py)."""
    try:
        return proxy_body_json(request)
    except RequestDataTooBig:
        return dialect.error(413, "the request body is too large", "invalid_request_error")
    except LengthRequired as exc:
        return dialect.error(411, str(exc), "invalid_request_error")
    except (ValueError, UnicodeDecodeError) as exc:
        return dialect.error(400, f"not {dialect.what}: {exc}", "invalid_request_error")


def proxy_not_found(request: HttpRequest, exception: Exception) -> JsonResponse:
    """A path under /proxy/ that names no endpoint, answered as an API would (config/wsgi.py)."""
    return _error(404, f"no proxy endpoint at {request.path}", "not_found")


def proxy_server_error(request: HttpRequest) -> JsonResponse:
    """A crash on the short path (config/wsgi.py), answered as an API would, not as a page."""
    return _error(500, "the proxy failed; the error is in the server's log", "api_error")


@csrf_exempt
@login_not_required
@require_GET
def proxy_models(request: HttpRequest, key: str) -> HttpResponse:
    session = _session_or_error(key, CHAT)
    if isinstance(session, JsonResponse):
        return session
    try:
        lease = upstream_lease()
        with released(lease):
            upstream = upstream_pool().request(
                "GET", f"{lease.url}/models", headers=upstream_headers(), timeout=upstream_timeout()
            )
    except UpstreamError as exc:
        return _error(502, f"the model server is unreachable: {exc}", "upstream_unreachable")
    return _passthrough(upstream.data, upstream)


@csrf_exempt
@login_not_required
@require_POST
def proxy_chat_completions(request: HttpRequest, key: str) -> HttpResponseBase:
    return _proxied(request, key, CHAT)


@csrf_exempt
@login_not_required
@require_POST
def proxy_messages(request: HttpRequest, key: str) -> HttpResponseBase:
    """Anthropic's Messages API (Claude Code), recorded as the chat call it becomes."""
    return _proxied(request, key, MESSAGES)


@csrf_exempt
@login_not_required
@require_POST
def proxy_responses(request: HttpRequest, key: str) -> HttpResponseBase:
    """OpenAI's Responses API (Codex), recorded as the chat call it becomes."""
    return _proxied(request, key, RESPONSES)


@csrf_exempt
@login_not_required
@require_POST
def proxy_count_tokens(request: HttpRequest, key: str) -> HttpResponse:
    """Anthropic's token count, by vLLM's /tokenize of the translated request: the count
    is of the prompt the served chat template renders, as the model will see it."""
    session = _session_or_error(key, MESSAGES)
    if isinstance(session, JsonResponse):
        return session
    try:
        slot = key_limits.admit(session.pk)
    except OverLimit as exc:
        return _over_limit(MESSAGES, exc)
    try:
        return _count_tokens(request, session)
    finally:
        slot.release()


def _count_tokens(request: HttpRequest, session: RecordingSession) -> HttpResponse:
    caller = _caller_json(request, MESSAGES)
    if isinstance(caller, HttpResponse):
        return caller
    try:
        if isinstance(caller, dict):
            caller = {**caller, "max_tokens": 1}  # the count request has none
        chat = MESSAGES.to_chat(caller)
        sampling_overrides_parse(session.sampling).apply(chat, context_len=None)
    except (ValueError, UnicodeDecodeError) as exc:
        param = exc.param if isinstance(exc, ProtocolError) else None
        return MESSAGES.error(400, f"not {MESSAGES.what}: {exc}", "invalid_request_error", param)
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
        return MESSAGES.error(502, f"the model server is unreachable: {exc}", "api_error")
    if upstream.status != 200:
        return MESSAGES.refused(upstream.status, upstream.data, "application/json")
    count = orjson.loads(upstream.data).get("count")
    return JsonResponse({"input_tokens": count})


def _proxied(request: HttpRequest, key: str, dialect: Dialect) -> HttpResponseBase:
    session = _session_or_error(key, dialect)
    if isinstance(session, JsonResponse):
        return session
    caller = _caller_json(request, dialect)
    if isinstance(caller, HttpResponse):
        return caller
    try:
        chat = dialect.to_chat(caller)
        overrides = sampling_overrides_parse(session.sampling)
        overrides.apply(chat, context_len=upstream_context_len)
        forwarded, asked = upstream_request(chat)
    except (ValueError, UnicodeDecodeError) as exc:
        param = exc.param if isinstance(exc, ProtocolError) else None
        message = f"not {dialect.what}: {exc}"
        return dialect.error(400, message, "invalid_request_error", param)
    try:
        slot = key_limits.admit(session.pk)
    except OverLimit as exc:
        return _over_limit(dialect, exc)
    call = _Call(
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


def _over_limit(dialect: Dialect, exc: OverLimit) -> HttpResponse:
    # 429 with Retry-After, as the OpenAI and Anthropic APIs answer a rate limit; their
    # clients wait and retry on their own.
    response = dialect.error(429, str(exc), "rate_limit_exceeded")
    response["Retry-After"] = exc.retry_after
    return response


class _Call:
    """One proxied call: forwards it, answers the caller, records it exactly once."""

    def __init__(
        self,
        *,
        session: RecordingSession,
        dialect: Dialect,
        caller: dict[str, Any],
        request: dict[str, Any],
        forwarded: dict[str, Any],
        asked: Asked,
        slot: Slot,
    ) -> None:
        self.session = session
        self.dialect = dialect
        self.caller = caller
        # What is stored: the chat request as sampled (translated, overrides applied),
        # without the token capture the proxy added.
        self.request = request
        self.forwarded = forwarded
        self.asked = asked
        self.slot = slot
        self.agent = agent_fingerprint(request.get("messages"))
        self.started = time.perf_counter()
        self.recorded = False

    def _send(self, *, stream: bool) -> urllib3.BaseHTTPResponse:
        """The call sent to a leased replica, which a whole call frees at once and a stream
        when it is closed (`_closed`)."""
        self.lease = upstream_lease()
        try:
            upstream = self._request(self.lease.url, stream=stream)
        except UpstreamError as exc:
            self.lease.fail(f"unreachable: {exc}")
            self.lease.release()
            raise
        if upstream.status >= 500:
            self.lease.fail(f"answered {upstream.status}")
        if not stream:
            self.lease.release()
        return upstream

    def _request(self, url: str, *, stream: bool) -> urllib3.BaseHTTPResponse:
        return upstream_pool().request(
            "POST",
            f"{url}/chat/completions",
            body=orjson.dumps(self.forwarded),
            headers=upstream_headers(
                {
                    "content-type": "application/json",
                    "accept": "text/event-stream" if stream else "application/json",
                }
            ),
            preload_content=not stream,
            timeout=upstream_timeout(),
        )

    def whole(self) -> HttpResponse:
        try:
            upstream = self._send(stream=False)
        except UpstreamError as exc:
            return self._unreachable(exc)
        if upstream.status != 200:
            self._record_refused(upstream.status, upstream.data.decode(errors="replace"))
            return self._refused(upstream.status, upstream.data, upstream)
        # The prompt's ids (32,000 ids are 200 KB of the answer) are cut out as bytes and
        # read by numpy, unless the caller asked for them back.
        ids_json, rest = (None, upstream.data)
        if not self.asked.token_ids:
            ids_json, rest = cut_prompt_ids(upstream.data)
        try:
            payload = orjson.loads(rest)
        except ValueError:
            self._record({}, error="model_bad_response: not JSON", aborted=True)
            if self.dialect is CHAT:
                return _passthrough(upstream.data, upstream)
            return self.dialect.error(502, "the model server answered with no JSON", "api_error")
        self._record_response(payload, prompt_ids_json=ids_json)
        return self.dialect.whole(payload, upstream.data, asked=self.asked, caller=self.caller)

    def _refused(
        self, status: int, content: bytes, upstream: urllib3.BaseHTTPResponse
    ) -> HttpResponse:
        content_type = upstream.headers.get("content-type", "application/json")
        return self.dialect.refused(status, content, content_type)

    def streamed(self) -> HttpResponseBase:
        try:
            upstream = self._send(stream=True)
        except UpstreamError as exc:
            return self._unreachable(exc)
        if upstream.status != 200:
            content = upstream.read()
            upstream.release_conn()
            self.lease.release()
            self._record_refused(upstream.status, content.decode(errors="replace"))
            return self._refused(upstream.status, content, upstream)
        relay = self._relay(upstream, self.dialect.stream(self.caller))
        response = StreamingHttpResponse(
            ReleasedAtClose(relay, self.slot, lambda: self._closed(upstream)),
            content_type=upstream.headers.get("content-type") or "text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # let nginx pass events on as they come
        return response

    def _closed(self, upstream: urllib3.BaseHTTPResponse) -> None:
        self.lease.release()
        # The server closed the answer before reading any of it (the agent was gone):
        # the relay never ran, so its `finally` did not either.
        if not self.recorded:
            upstream.close()
            upstream.release_conn()
            self._record({}, error="client_disconnected: closed before it was read", aborted=True)

    def _relay(
        self, upstream: urllib3.BaseHTTPResponse, translator: StreamTranslator | None
    ) -> Iterator[bytes]:
        fold = StreamFold()
        problem = "stream_broken: the stream ended before [DONE]"
        splitter = SseSplitter()
        try:
            # Nothing yet: the server sends the headers now, as the upstream just did, so
            # the agent reads them while the first event is still being made.
            yield b""
            for piece in _pieces(upstream):
                yield from self._relay_events(splitter.feed(piece), fold, translator)
            if splitter.rest().strip():
                yield from self._relay_events([splitter.rest()], fold, translator)
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
        if problem:
            # Said in an event of the API's own, so the agent's client raises instead of
            # taking a cut-off answer for a whole one.
            yield translator.error(problem) if translator is not None else _chat_error(problem)

    def _relay_events(
        self, events: list[bytes], fold: StreamFold, translator: StreamTranslator | None
    ) -> Iterator[bytes]:
        for event in events:
            if translator is None:
                relayed = self._event(event, fold) + b"\n\n"
            else:
                relayed = self._translated(event, fold, translator)
            if fold.done and not self.recorded:
                # Stored before the agent reads [DONE], as a whole call is stored before
                # its answer leaves: an agent (or a researcher closing the session) that
                # goes on at [DONE] finds the call there.
                self._record_response(fold.response(), prompt_ids_json=fold.prompt_ids_json)
            yield relayed

    def _event(self, event: bytes, fold: StreamFold) -> bytes:
        data = sse_data(event)
        if data is None:
            return event
        if data.strip() == b"[DONE]":
            fold.done = True
            return event
        chunk, _ = self._chunk(data, fold, keep_ids=self.asked.token_ids)
        if chunk is None:
            return event
        if not needs_stripping(self.asked):
            return event
        return b"data: " + orjson.dumps(strip_added(chunk, self.asked))

    def _chunk(
        self, data: bytes, fold: StreamFold, *, keep_ids: bool
    ) -> tuple[dict[str, Any] | None, bytes | None]:
        """The chunk decoded and folded in, and its prompt ids as JSON if it had them: those
        are decoded only when the call is stored."""
        ids_json = None
        if not keep_ids:
            ids_json, data = cut_prompt_ids(data)
        try:
            chunk = orjson.loads(data)
        except ValueError:
            return None, None
        if not isinstance(chunk, dict):
            return None, None
        if ids_json is not None:
            fold.prompt_ids_json = ids_json
        fold.feed(chunk)
        return chunk, ids_json

    def _translated(self, event: bytes, fold: StreamFold, translator: StreamTranslator) -> bytes:
        data = sse_data(event)
        if data is None:
            return b""
        if data.strip() == b"[DONE]":
            fold.done = True
            return translator.finish()
        chunk, ids_json = self._chunk(data, fold, keep_ids=False)
        if chunk is None:
            return b""
        if ids_json is not None:
            # The translators report the prompt's size at once (Anthropic's message_start);
            # counting commas costs microseconds where decoding 32,000 ids costs 0.4 ms.
            count = ids_json.count(b",") + 1 if ids_json.strip(b"[] ") else 0
            chunk = {**chunk, "usage": {**(chunk.get("usage") or {}), "prompt_tokens": count}}
        return translator.feed(chunk)

    def _unreachable(self, exc: Exception) -> JsonResponse:
        # urllib3 counts a refused connection as a kind of connect timeout; it is not one.
        timed_out = isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
            exc, urllib3.exceptions.NewConnectionError
        )
        reason = "model_timeout" if timed_out else "upstream_unreachable"
        message = f"{reason}: {type(exc).__name__}: {exc}"
        self._record({}, error=message, aborted=True)
        return self.dialect.error(502, f"the model server did not answer ({message})", reason)

    def _record_refused(self, status: int, text: str) -> None:
        # The server refused the request (e.g. a context too long): the agent sees the
        # refusal and goes on, so the trajectory stays faithful; only a call that started
        # and did not finish (5xx, broken stream) is aborted.
        self._record({}, error=f"upstream_{status}: {text[:500]}", aborted=status >= 500)

    def _record_response(
        self, payload: dict[str, Any], *, prompt_ids_json: bytes | None = None
    ) -> None:
        found = tokens_of(payload, prompt_ids_json=prompt_ids_json)
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
                    api=self.dialect.api,
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


def _chat_error(problem: str) -> bytes:
    # vLLM's own mid-stream error event (the openai client raises APIError on it); no
    # [DONE] after it, so a client that skips error events still sees the stream cut off.
    error = {"message": f"the model server broke off: {problem}", "type": "api_error"}
    return b"data: " + orjson.dumps({"error": {**error, "param": None, "code": 502}}) + b"\n\n"


def _passthrough(content: bytes, upstream: urllib3.BaseHTTPResponse) -> HttpResponse:
    return HttpResponse(
        content,
        status=upstream.status,
        content_type=upstream.headers.get("content-type", "application/json"),
    )


def _pieces(upstream: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The body as it arrives, whether chunked (vLLM) or ended by closing the connection:
    `read1` returns what one read gives instead of waiting to fill its buffer."""
    while piece := upstream.read1(1024 * 1024):
        yield piece
