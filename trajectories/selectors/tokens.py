"""Token strips of an episode's model calls: ids, logprobs and the loss mask, per turn.

Each token shows its text: decoded by the tokenizer of the weights on this machine when
there is one (`token_decoder`), else the text the server returned with the logprobs, else
its id, with a note saying why. The loss mask is the one training sees: calls are merged
into chains by prefix (`reconstruct`'s default strategy), so a call's new prompt tokens (tool
results, template markup) are masked and only its sampled tokens are trained on.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings

from harness_app.harness.llm.reconstruct import Segment, reconstruct
from trajectories.models import Episode, ModelCall

MASKED_TAIL = 48  # masked tokens shown before a completion; the rest are counted
SAMPLED_CAP = 1024  # completion tokens drawn per call


def call_content(response: Mapping[str, Any]) -> str:
    """The assistant's text in a chat or completion response."""
    choice = (response.get("choices") or [{}])[0] if response else {}
    message = choice.get("message") or {}
    content = message.get("content") if message else choice.get("text")
    return str(content or "")


@dataclass(frozen=True)
class Token:
    token_id: int
    logprob: float | None  # None for masked (prompt-side) tokens
    trained: bool  # the loss mask: 1 where the token was sampled by the policy
    text: str | None

    @property
    def bucket(self) -> int:
        """0 (confident) .. 4 (surprising): the colour of a sampled token."""
        if self.logprob is None:
            return -1
        for bucket, floor in enumerate((-0.1, -0.5, -1.5, -3.0)):
            if self.logprob >= floor:
                return bucket
        return 4

    @property
    def probability(self) -> float | None:
        return None if self.logprob is None else math.exp(self.logprob)


@dataclass(frozen=True)
class TokenStrip:
    call_id: int
    number: int  # 1-based place among the episode's calls, as the viewer's headings say
    chain: int  # which reconstructed training sequence the call belongs to
    break_reason: str  # why the call started a new chain; "" when it extended one
    masked_before: int  # masked tokens between the previous completion and this one
    masked_tail: list[Token]
    sampled: list[Token]
    sampled_total: int
    content: str

    @property
    def masked_hidden(self) -> int:
        """Masked tokens before the shown tail, counted but not drawn."""
        return self.masked_before - len(self.masked_tail)


@dataclass(frozen=True)
class TokenDecoder:
    """Token ids to text, one string per id; `decode` is None when no tokenizer is here."""

    decode: Callable[[Sequence[int]], list[str]] | None
    note: str  # which tokenizer decoded the ids, or why none did


def token_strips(
    *, episode: Episode, turn_index: int, decoder: TokenDecoder | None = None
) -> list[TokenStrip]:
    """The turn's model calls as token strips, masked and sampled, by prefix merging.

    Reads every call of the episode (one query): the loss mask of a turn's call depends on
    the chain built from the successful calls before it, and a call's number on all of them.
    """
    every = list(ModelCall.objects.filter(episode=episode).order_by("pk"))
    numbers = {c.pk: number for number, c in enumerate(every, start=1)}
    calls = [c for c in every if not c.error]
    # A recorded session may hold a main agent and subagents: chains are merged per agent.
    chains, breaks = reconstruct([c.call_tokens() for c in calls])
    reasons = {b.call_id: b.reason for b in breaks}
    by_id = {c.pk: c for c in calls}
    strips = []
    for number, chain in enumerate(chains):
        for call_id, start, prompt_end, end in _call_spans(chain, by_id):
            call = by_id[call_id]
            if call.turn_index == turn_index:
                strip = _strip(
                    call, chain, number, reasons.get(call_id, ""), start, prompt_end, end
                )
                strips.append(replace(strip, number=numbers[call_id]))
    if decoder is None or decoder.decode is None:
        return strips
    return [_decoded(s, decoder.decode) for s in strips]


def _decoded(strip: TokenStrip, decode: Callable[[Sequence[int]], list[str]]) -> TokenStrip:
    """The strip with every token's text; text the server returned with a sampled token's
    logprob is kept, as it is what the server itself decoded."""
    tokens = [*strip.masked_tail, *strip.sampled]
    texts = decode([t.token_id for t in tokens])
    shown = [
        t if t.text is not None else replace(t, text=text)
        for t, text in zip(tokens, texts, strict=True)
    ]
    cut = len(strip.masked_tail)
    return replace(strip, masked_tail=shown[:cut], sampled=shown[cut:])


def token_decoder(*, model_dir: str | None = None) -> TokenDecoder:
    """The tokenizer of the model folder on this machine (`RL_BASE_MODEL_DIR`, the weights
    `make llm` serves and the trainers load), loaded once per process and folder.

    Policy configs name a served model rather than a folder, so this is the one tokenizer
    the workbench knows; it is read from local files only, never the network.
    """
    folder = Path(model_dir or settings.RL_BASE_MODEL_DIR)
    if (
        not (folder / "tokenizer.json").is_file()
        and not (folder / "tokenizer_config.json").is_file()
    ):
        return TokenDecoder(
            None,
            f"Token ids are shown as numbers: no tokenizer at {folder} (RL_BASE_MODEL_DIR; "
            "`make llm` writes one there).",
        )
    return _load_decoder(str(folder.resolve()))


@functools.lru_cache(maxsize=4)
def _load_decoder(folder: str) -> TokenDecoder:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return TokenDecoder(
            None,
            "Token ids are shown as numbers: the transformers package (the 'train' extra) "
            "is not installed in the web process.",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        return TokenDecoder(None, f"Token ids are shown as numbers: {folder}: {exc}")
    size = len(tokenizer)

    def decode(ids: Sequence[int]) -> list[str]:
        return [
            str(tokenizer.decode([i], clean_up_tokenization_spaces=False))
            if 0 <= i < size
            else f"<{i}>"
            for i in ids
        ]

    return TokenDecoder(decode, f"Token text decoded with the tokenizer in {folder}.")


def _call_spans(
    chain: Segment, calls: Mapping[Any, ModelCall]
) -> Iterable[tuple[Any, int, int, int]]:
    # After call k a chain holds exactly prompt_k + completion_k, so each call's tokens are
    # the span from the previous call's end to its own.
    start = 0
    for call_id in chain.call_ids:
        call = calls[call_id]
        prompt_end = len(call.prompt_token_ids)
        end = prompt_end + len(call.completion_token_ids)
        yield call_id, start, prompt_end, end
        start = end


def _strip(
    call: ModelCall,
    chain: Segment,
    number: int,
    reason: str,
    start: int,
    prompt_end: int,
    end: int,
) -> TokenStrip:
    texts = _token_texts(call.response, end - prompt_end)
    masked_from = max(start, prompt_end - MASKED_TAIL)
    masked = [
        Token(chain.token_ids[i], None, bool(chain.loss_mask[i]), None)
        for i in range(masked_from, prompt_end)
    ]
    sampled = [
        Token(
            chain.token_ids[i],
            chain.logprobs[i],
            bool(chain.loss_mask[i]),
            texts[i - prompt_end] if texts else None,
        )
        for i in range(prompt_end, min(end, prompt_end + SAMPLED_CAP))
    ]
    return TokenStrip(
        call_id=call.pk,
        number=0,
        chain=number,
        break_reason=reason,
        masked_before=prompt_end - start,
        masked_tail=masked,
        sampled=sampled,
        sampled_total=end - prompt_end,
        content=call_content(call.response),
    )


def _token_texts(response: Mapping[str, Any], count: int) -> list[str] | None:
    """The sampled tokens' text from the logprobs the server returned, when it did."""
    choice = (response.get("choices") or [{}])[0] if response else {}
    items = (choice.get("logprobs") or {}).get("content") or []
    texts = [str(item.get("token", "")) for item in items if isinstance(item, dict)]
    return texts if len(texts) == count else None
