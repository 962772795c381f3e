"""A streamed chat answer relayed in the caller's API, and folded into the call it makes.

The upstream's bytes come in pieces as they are read; `Relay` splits them into events,
hands each to the dialect's `EventStream`, and folds each chunk into the answer the same
call would have got whole (`StreamFold`), which is what gets recorded. The prompt's ids,
200 KB of JSON for 32,000 tokens, are cut out as bytes and decoded only when the call is
stored, unless the caller asked for them back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from harness_app.wire.chat import StreamFold
from harness_app.wire.dialects import EventStream
from harness_app.wire.record import CallOutcome, cut_prompt_ids
from harness_app.wire.sse import SseSplitter, sse_data

STREAM_BROKEN = "stream_broken: the stream ended before [DONE]"


class Relay:
    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self.fold = StreamFold()
        self._splitter = SseSplitter()

    @property
    def done(self) -> bool:
        """The upstream said [DONE]: the answer is whole."""
        return self.fold.done

    def feed(self, piece: bytes) -> Iterator[bytes]:
        """The caller's bytes for each whole event the piece completes (b"" for an event
        the caller's API has no counterpart of)."""
        for event in self._splitter.feed(piece):
            yield self._relayed(event)

    def end(self) -> Iterator[bytes]:
        """At the end of the upstream's body: an event left without its blank line."""
        rest = self._splitter.rest()
        if rest.strip():
            yield self._relayed(rest)

    def answered(self) -> CallOutcome:
        """The call as recorded once the stream is whole."""
        return CallOutcome.answered(self.fold.response(), prompt_ids_json=self.fold.prompt_ids_json)

    def broken(self, problem: str) -> CallOutcome:
        """The call as recorded when the stream broke off: what had come, folded."""
        return CallOutcome.failed(problem, self.fold.response())

    def _relayed(self, event: bytes) -> bytes:
        data = sse_data(event)
        if data is None:
            return self.stream.other(event)
        if data.strip() == b"[DONE]":
            self.fold.done = True
            return self.stream.finish(event)
        ids_json = None
        if not self.stream.keeps_prompt_ids:
            ids_json, data = cut_prompt_ids(data)
        chunk = _decoded(data)
        if chunk is None:
            return self.stream.other(event)
        prompt_tokens = None
        if ids_json is not None:
            self.fold.prompt_ids_json = ids_json
            # Counting commas costs microseconds where decoding 32,000 ids costs 0.4 ms.
            prompt_tokens = ids_json.count(b",") + 1 if ids_json.strip(b"[] ") else 0
        self.fold.feed(chunk)
        return self.stream.feed(chunk, event, prompt_tokens)


def _decoded(data: bytes) -> dict[str, Any] | None:
    try:
        chunk = orjson.loads(data)
    except ValueError:
        return None
    return chunk if isinstance(chunk, dict) else None
