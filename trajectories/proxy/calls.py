"""One proxied call: sent to a leased replica, answered in the caller's API, recorded once.

The caller's API is the call's dialect (harness_app/wire/dialects.py); what is recorded is
the call's `CallOutcome` (harness_app/wire/record.py), whatever happened to it, by the one
`_record` below.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import orjson
import urllib3
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from harness_app.wire.chat import Asked, agent_fingerprint
from harness_app.wire.dialects import Answer, Dialect
from harness_app.wire.record import CallOutcome, cut_prompt_ids
from harness_app.wire.relay import STREAM_BROKEN, Relay
from trajectories.models import RecordingSession
from trajectories.proxy.limits import ReleasedAtClose, Slot
from trajectories.proxy.upstream import (
    UpstreamError,
    upstream_headers,
    upstream_lease,
    upstream_pool,
    upstream_timeout,
)
from trajectories.services.recording import RecordedCall, recorded_call_save

log = logging.getLogger(__name__)


def answered(answer: Answer) -> HttpResponse:
    """A dialect's answer as the response the server sends."""
    return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)


class ProxiedCall:
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
        content_type = upstream.headers.get("content-type", "application/json")
        if upstream.status != 200:
            self._record(CallOutcome.refused(upstream.status, _text(upstream.data)))
            return answered(self.dialect.refused(upstream.status, upstream.data, content_type))
        # The prompt's ids (32,000 ids are 200 KB of the answer) are cut out as bytes and
        # read by numpy, unless the caller asked for them back.
        ids_json, rest = (None, upstream.data)
        if not self.asked.token_ids:
            ids_json, rest = cut_prompt_ids(upstream.data)
        try:
            payload = orjson.loads(rest)
        except ValueError:
            self._record(CallOutcome.failed("model_bad_response: not JSON"))
            return answered(self.dialect.not_json(upstream.status, upstream.data, content_type))
        self._record(CallOutcome.answered(payload, prompt_ids_json=ids_json))
        whole = self.dialect.whole(payload, upstream.data, asked=self.asked, caller=self.caller)
        return answered(whole)

    def streamed(self) -> HttpResponseBase:
        try:
            upstream = self._send(stream=True)
        except UpstreamError as exc:
            return self._unreachable(exc)
        content_type = upstream.headers.get("content-type", "application/json")
        if upstream.status != 200:
            content = upstream.read()
            upstream.release_conn()
            self.lease.release()
            self._record(CallOutcome.refused(upstream.status, _text(content)))
            return answered(self.dialect.refused(upstream.status, content, content_type))
        relay = Relay(self.dialect.stream(self.caller, self.asked))
        response = StreamingHttpResponse(
            ReleasedAtClose(
                self._relayed(upstream, relay), self.slot, lambda: self._closed(upstream)
            ),
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
            self._record(CallOutcome.failed("client_disconnected: closed before it was read"))

    def _relayed(self, upstream: urllib3.BaseHTTPResponse, relay: Relay) -> Iterator[bytes]:
        problem = STREAM_BROKEN
        try:
            # Nothing yet: the server sends the headers now, as the upstream just did, so
            # the agent reads them while the first event is still being made.
            yield b""
            for piece in _pieces(upstream):
                yield from self._recorded_at_done(relay.feed(piece), relay)
            yield from self._recorded_at_done(relay.end(), relay)
            if relay.done:
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
                self._record(relay.broken(problem))
        if problem:
            # Said in an event of the API's own, so the agent's client raises instead of
            # taking a cut-off answer for a whole one.
            yield relay.stream.error(problem)

    def _recorded_at_done(self, relayed: Iterator[bytes], relay: Relay) -> Iterator[bytes]:
        for event in relayed:
            if relay.done and not self.recorded:
                # Stored before the agent reads [DONE], as a whole call is stored before
                # its answer leaves: an agent (or a researcher closing the session) that
                # goes on at [DONE] finds the call there.
                self._record(relay.answered())
            yield event

    def _unreachable(self, exc: Exception) -> HttpResponse:
        # urllib3 counts a refused connection as a kind of connect timeout; it is not one.
        timed_out = isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
            exc, urllib3.exceptions.NewConnectionError
        )
        reason = "model_timeout" if timed_out else "upstream_unreachable"
        message = f"{reason}: {type(exc).__name__}: {exc}"
        self._record(CallOutcome.failed(message))
        return answered(
            self.dialect.error(502, f"the model server did not answer ({message})", reason)
        )

    def _record(self, outcome: CallOutcome) -> None:
        self.recorded = True
        total_ms = (time.perf_counter() - self.started) * 1000
        version = str(outcome.response.get("model") or self.request.get("model") or "")
        tokens = outcome.tokens
        try:
            recorded_call_save(
                session=self.session,
                call=RecordedCall(
                    request=self.request,
                    response=outcome.response,
                    prompt_ids=tokens.prompt_ids,
                    completion_ids=tokens.completion_ids,
                    logprobs=tokens.logprobs,
                    agent=self.agent,
                    api=self.dialect.api,
                    policy_version=version,
                    latency_ms=total_ms,
                    error=outcome.error,
                    aborted=outcome.aborted,
                ),
            )
        except Exception:
            # The agent still gets its answer; the lost record shows in the log.
            log.exception("could not record a call of recording session %s", self.session.pk)


def _text(content: bytes) -> str:
    return content.decode(errors="replace")


def _pieces(upstream: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The body as it arrives, whether chunked (vLLM) or ended by closing the connection:
    `read1` returns what one read gives instead of waiting to fill its buffer."""
    while piece := upstream.read1(1024 * 1024):
        yield piece
