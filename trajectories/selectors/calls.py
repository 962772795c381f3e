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

from django.db.models import Count, OuterRef, QuerySet, Subquery

from harness_app.harness.llm.reconstruct import (
    PREFIX_MERGE,
    CallTokens,
    ChainBreak,
    Segment,
    reconstruct,
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
    rerendered: bool = False  # the prompt was rebuilt from the state (rerender mode)
    number: int = 0  # 1-based place among the episode's calls, as the pages number them


def call_summary(call: ModelCall, *, number: int = 0) -> CallSummary:
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
        rerendered=call.rerendered,
        number=number,
    )


def call_number_annotation() -> Subquery:
    """Each call's 1-based place among its episode's calls, by id (the order they were
    made): the one numbering the viewer's headings, prompts and token strips share."""
    earlier = (
        ModelCall.objects.filter(episode_id=OuterRef("episode_id"), pk__lte=OuterRef("pk"))
        .order_by()
        .values("episode_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Subquery(earlier)


@dataclass(frozen=True)
class CallPrompt:
    """The prompt one call sent: the chat messages it was rendered from, and its size."""

    pk: int
    number: int  # 1-based place among the episode's calls
    messages: list[dict[str, Any]]
    prompt_tokens: int | None  # None when the call failed before the server counted it
    token_in: bool  # sent as token ids rendered from `messages` by the server's template
    rerendered: bool
    error: str


def turn_prompts(*, episode: Episode, turn_index: int) -> list[CallPrompt]:
    """The exact prompt of each model call made in answer to turn `turn_index`.

    A chat request holds its messages, and a rerendered token-in call stores its own; an
    append-mode token-in call stores only the messages added since the episode's previous
    call, so its prompt is the concatenation of those parts up to it (two queries)."""
    calls = list(
        ModelCall.objects.filter(episode=episode, turn_index=turn_index)
        .defer("completion_token_ids_blob", "completion_logprobs_blob")
        .annotate(number=call_number_annotation())
        .order_by("pk")
    )
    parts: list[tuple[int, list[dict[str, Any]]]] = []
    if calls and any(c.own_prompt_messages is None for c in calls):
        earlier = ModelCall.objects.filter(
            episode=episode, pk__lte=calls[-1].pk, rerendered=False
        ).order_by("pk")
        parts = [(pk, messages) for pk, messages in earlier.values_list("pk", "prompt_messages")]
    out = []
    for call in calls:
        messages = call.own_prompt_messages
        if messages is None:
            messages = [m for pk, part in parts if pk <= call.pk for m in part]
        counted = call.usage.get("prompt_tokens") if call.usage else None
        if counted is None and call.prompt_token_ids_blob:
            counted = len(call.prompt_token_ids)
        out.append(
            CallPrompt(
                pk=call.pk,
                number=call.number,
                messages=[_shown(m) for m in messages],
                prompt_tokens=counted,
                token_in="prompt" in call.request,
                rerendered=call.rerendered,
                error=call.error,
            )
        )
    return out


def _shown(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its tool calls as indented JSON, for the page."""
    calls = message.get("tool_calls")
    return {
        "role": str(message.get("role", "")),
        "content": str(message.get("content") or ""),
        "tool_call_id": str(message.get("tool_call_id") or ""),
        "tool_calls": json.dumps(calls, indent=1, ensure_ascii=False) if calls else "",
    }


_CALL_TOKEN_COLUMNS = (
    "episode_id",
    "pk",
    "prompt_token_ids_blob",
    "completion_token_ids_blob",
    "completion_logprobs_blob",
    "policy_version",
    "agent",
    "rerendered",
)


def call_tokens_by_episode(calls: QuerySet[ModelCall]) -> dict[int, list[CallTokens]]:
    """The token data of `calls`, per episode, in the queryset's order: one query that
    reads the token blobs only, never the request and response JSON."""
    out: dict[int, list[CallTokens]] = defaultdict(list)
    rows = calls.values_list(*_CALL_TOKEN_COLUMNS).iterator(chunk_size=200)
    for episode_id, pk, prompt, completion, logprobs, version, agent, rerendered in rows:
        out[episode_id].append(
            CallTokens(
                pk,
                unpack_ints(prompt),
                unpack_ints(completion),
                unpack_floats(logprobs),
                version,
                agent,
                rerendered,
            )
        )
    return out


def episode_segments(
    *, episode: Episode, reconstruction: str = PREFIX_MERGE
) -> tuple[list[Segment], list[ChainBreak]]:
    """Training sequences rebuilt from the episode's successful model calls under the
    `reconstruction` strategy (`reconstruct`'s ValueError names an unknown one). Failed
    calls carry no completion and are left out.
    """
    calls = [
        call.call_tokens()
        for call in ModelCall.objects.filter(episode=episode, error="").order_by("pk")
    ]
    return reconstruct(calls, strategy=reconstruction)
