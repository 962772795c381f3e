"""Reads of model calls: summaries without their token blobs for the viewers, and the
token data that SFT exports and RL train on.

`call_tokens_by_episode` is the one reader of the calls' token blobs for exports and RL;
`episode_segments` rebuilds one episode's training sequences.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from harness_app.harness.llm.reconstruct import (
    CallTokens,
    ChainBreak,
    Segment,
    reconstruct_per_request,
    reconstruct_prefix_merged,
)
from trajectories.models import Episode, ModelCall, unpack_floats, unpack_ints
from trajectories.selectors.tokens import call_content

BLOB_FIELDS = ("prompt_token_ids_blob", "completion_token_ids_blob", "completion_logprobs_blob")


@dataclass(frozen=True)
class CallSummary:
    """A model call of the turn without its token blobs (those load with the token strip)."""

    pk: int
    content: str
    tool_calls: str
    finish_reason: str
    latency_ms: float
    usage: dict[str, Any]
    error: str


def call_summary(call: ModelCall) -> CallSummary:
    """The call's reply text, tool calls and figures; needs no token blob loaded."""
    choice = (call.response.get("choices") or [{}])[0] if call.response else {}
    tool_calls = (choice.get("message") or {}).get("tool_calls")
    return CallSummary(
        pk=call.pk,
        content=call_content(call.response),
        tool_calls=json.dumps(tool_calls, indent=1, ensure_ascii=False) if tool_calls else "",
        finish_reason=call.finish_reason,
        latency_ms=call.latency_ms,
        usage=call.usage,
        error=call.error,
    )


_CALL_TOKEN_COLUMNS = (
    "episode_id",
    "pk",
    "prompt_token_ids_blob",
    "completion_token_ids_blob",
    "completion_logprobs_blob",
    "policy_version",
    "agent",
)


def call_tokens_by_episode(calls: QuerySet[ModelCall]) -> dict[int, list[CallTokens]]:
    """The token data of `calls`, per episode, in the queryset's order: one query that
    reads the token blobs only, never the request and response JSON."""
    out: dict[int, list[CallTokens]] = defaultdict(list)
    rows = calls.values_list(*_CALL_TOKEN_COLUMNS).iterator(chunk_size=200)
    for episode_id, pk, prompt, completion, logprobs, version, agent in rows:
        out[episode_id].append(
            CallTokens(
                pk,
                unpack_ints(prompt),
                unpack_ints(completion),
                unpack_floats(logprobs),
                version,
                agent,
            )
        )
    return out


def episode_segments(
    *, episode: Episode, mode: str = "prefix"
) -> tuple[list[Segment], list[ChainBreak]]:
    """Training sequences rebuilt from the episode's successful model calls.

    `mode` is "prefix" (merge calls whose prompts extend the chain) or "request" (one
    sequence per call). Failed calls carry no completion and are left out.
    """
    calls = [
        call.call_tokens()
        for call in ModelCall.objects.filter(episode=episode, error="").order_by("pk")
    ]
    if mode == "request":
        return reconstruct_per_request(calls), []
    if mode != "prefix":
        raise ValueError(f"unknown reconstruction mode {mode!r}; use prefix or request")
    return reconstruct_prefix_merged(calls)
