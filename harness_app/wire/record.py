"""What a proxied call leaves for its record: the answer as stored, its token capture, and
what went wrong, the same for every API and for whole and streamed answers alike.

`CallOutcome` is the one shape the proxy records (trajectories/proxy/calls.py); the
token capture is read here from vLLM's answer: ids straight from the JSON bytes into the
int32 and float32 arrays they are stored in.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CallTokensFound:
    """A call's token capture, as the int32 and float32 arrays it is stored in."""

    prompt_ids: array[int]
    completion_ids: array[int]
    logprobs: array[float]
    problem: str  # "" when the token capture is whole


def tokens_of(
    response: Mapping[str, Any], *, prompt_ids_json: bytes | None = None
) -> CallTokensFound:
    """Token ids and sampled logprobs from a (folded) chat completion response.

    `prompt_ids_json` is the prompt's id list as the raw JSON cut out of the answer
    (`cut_prompt_ids`), when it was. The arrays check the ids in C: a prompt of 8,000 ids
    costs 0.14 ms instead of the 0.35 ms of converting each one in Python, and this runs
    while the agent waits.
    """
    choice = (response.get("choices") or [{}])[0] or {}
    prompt = response.get("prompt_token_ids")
    completion = choice.get("token_ids")
    content = (choice.get("logprobs") or {}).get("content")
    has_prompt = prompt_ids_json is not None or isinstance(prompt, list)
    if not has_prompt or not isinstance(completion, list):
        return _no_tokens("token_capture_missing: the server returned no ids")
    try:
        if prompt_ids_json is not None:
            prompt_ids = ids_from_json(prompt_ids_json)
        else:
            prompt_ids = array("i", prompt or [])
        completion_ids = array("i", completion)
        logprobs = array("f", [item.get("logprob", 0.0) for item in content or []])
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        return _no_tokens(f"token_capture_malformed: {exc}")
    problem = ""
    if len(logprobs) != len(completion_ids):
        problem = (
            f"token_count_mismatch: {len(completion_ids)} completion tokens "
            f"but {len(logprobs)} logprobs"
        )
    return CallTokensFound(prompt_ids, completion_ids, logprobs, problem)


INT32 = np.iinfo(np.int32)


def ids_from_json(raw: bytes) -> array[int]:
    """A JSON list of token ids as the int32 array it is stored in.

    numpy reads the text straight into integers: 32,000 ids cost about 0.5 ms, against
    1.2 ms for orjson's list of Python ints and the array built from it (bench_proxy's
    32k-token calls). ValueError for anything but a flat list of integers.
    """
    body = raw.strip()
    if body[:1] != b"[" or body[-1:] != b"]":
        raise ValueError("the prompt ids are not a JSON list")
    body = body[1:-1]
    ids = array("i")
    if not body.strip():
        return ids
    parsed = np.fromstring(body, dtype=np.int64, sep=",")
    if len(parsed) != body.count(b",") + 1:
        raise ValueError("the prompt ids are not a list of integers")
    if parsed.min() < INT32.min or parsed.max() > INT32.max:
        raise OverflowError("a prompt id is out of the int32 range")
    ids.frombytes(parsed.astype(np.int32).tobytes())
    return ids


def _no_tokens(problem: str) -> CallTokensFound:
    return CallTokensFound(array("i"), array("i"), array("f"), problem)


PROMPT_IDS_KEY = b'"prompt_token_ids":'


def cut_prompt_ids(data: bytes) -> tuple[bytes | None, bytes]:
    """A stream chunk's prompt id list as raw JSON, and the chunk with `null` in its place.

    vLLM sends the prompt's ids once, in the first chunk: 32,000 ids are 200 KB of JSON.
    Decoding them (0.4 ms) before the first event goes out would delay the agent's first
    byte, so the list is cut out as bytes and decoded when the call is stored. A chunk
    without a list comes back whole.
    """
    at = data.find(PROMPT_IDS_KEY)
    if at < 0:
        return None, data
    start = at + len(PROMPT_IDS_KEY)
    while data[start : start + 1] == b" ":
        start += 1
    if data[start : start + 1] != b"[":
        return None, data
    end = data.find(b"]", start)
    if end < 0:
        return None, data
    return data[start : end + 1], data[:start] + b"null" + data[end + 1 :]


@dataclass(frozen=True)
class CallOutcome:
    """What one call came to: the answer as stored, its tokens, and its error ("" when it
    finished) and whether it was cut off (a refusal the agent read and went on from is
    not)."""

    response: dict[str, Any]
    tokens: CallTokensFound
    error: str
    aborted: bool

    @classmethod
    def answered(
        cls, payload: Mapping[str, Any], *, prompt_ids_json: bytes | None = None
    ) -> CallOutcome:
        """A whole or folded chat answer; a gap in its token capture aborts it."""
        found = tokens_of(payload, prompt_ids_json=prompt_ids_json)
        return cls(_without_token_ids(payload), found, found.problem, bool(found.problem))

    @classmethod
    def refused(cls, status: int, text: str) -> CallOutcome:
        """The upstream refused the call (e.g. a context too long): the agent sees the
        refusal and goes on, so the trajectory stays faithful; only a 5xx is aborted."""
        return cls({}, _no_tokens(""), f"upstream_{status}: {text[:500]}", status >= 500)

    @classmethod
    def failed(cls, problem: str, partial: Mapping[str, Any] | None = None) -> CallOutcome:
        """A call that did not finish; `partial` is what a broken stream had folded."""
        return cls(dict(partial or {}), _no_tokens(""), problem, True)


def _without_token_ids(payload: Mapping[str, Any]) -> dict[str, Any]:
    # The ids are stored once, as int32 blobs; as JSON they would double the row.
    stored = {k: v for k, v in payload.items() if k != "prompt_token_ids"}
    stored["choices"] = [
        {k: v for k, v in choice.items() if k != "token_ids"}
        if isinstance(choice, dict)
        else choice
        for choice in payload.get("choices") or []
    ]
    return stored
