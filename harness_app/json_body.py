"""A limit on how deeply a JSON request body may nest, for the API and the recording proxy.

Python's json module recurses once per level: a body of 50,000 `[` (50 KB) raises
RecursionError, a 500 with its traceback in the log, where the caller deserves a 400 that
says why. orjson (the proxy's reader) stops at 1024 levels but writes at most 254, so a
body it read could still crash the call it forwards. One limit, checked before either
parses, gives both the same clear refusal; no request the project takes nests anywhere
near it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 128

# A JSON string, escapes included; what it holds is text, not nesting.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


class JsonTooDeep(ValueError):
    def __init__(self) -> None:
        super().__init__(
            f"the JSON body is nested too deeply: at most {MAX_JSON_DEPTH} levels of "
            "arrays and objects"
        )


def json_depth_check(raw: bytes) -> None:
    """Raise JsonTooDeep when arrays and objects in `raw` nest past MAX_JSON_DEPTH."""
    # Fewer openers than the limit cannot nest past it: most bodies stop here, unscanned.
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    steps = (1 if c in b"[{" else -1 for c in brackets)
    if max(accumulate(steps), default=0) > MAX_JSON_DEPTH:
        raise JsonTooDeep


class DepthLimitedJSONParser(JSONParser):
    """DRF's JSON parser, refusing a body nested past MAX_JSON_DEPTH with a 400 that says so
    (the default parser in settings; views that name their parsers use it too)."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        raw = stream.read()
        try:
            json_depth_check(raw)
        except JsonTooDeep as exc:
            raise ParseError(str(exc)) from None
        return super().parse(io.BytesIO(raw), media_type, parser_context)
