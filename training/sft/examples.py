"""SFT export lines as training examples: ids, labels (-100 where the policy did not
write the token), the episode each belongs to, and the split by episode.

No torch and no Django here: the tokenizer is passed in (training/sft/train.py explains
the two kinds of record).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IGNORE_INDEX = -100
INPUT_TOKENS = "recorded_tokens"
INPUT_CHAT = "chat_template"


class SFTDataError(ValueError):
    """No usable approved data, or a record that cannot be read; the message says where."""


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    episode: int  # the split key
    line: int
    source: str  # INPUT_TOKENS | INPUT_CHAT

    @property
    def trained_tokens(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


@dataclass
class Loaded:
    examples: list[Example]
    counts: dict[str, int]


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, template: str | None,
            *, generation_prompt: bool) -> str:  # fmt: skip
    text = tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        chat_template=template,
        tokenize=False,
        add_generation_prompt=generation_prompt,
    )
    return str(text)


def chat_example(
    record: dict[str, Any], tokenizer: Any, template: str | None, *, where: str
) -> tuple[list[int], list[int]]:
    """A chat record as ids with labels on the assistant messages' tokens only.

    Each assistant message's span is what the template adds between the conversation up
    to it with a generation prompt and the conversation including it, which is the text
    the model would have produced; trailing whitespace after its end-of-turn marker is left
    out (the server stops at the marker). The spans must be prefixes of the whole
    rendering: a template that rewrites earlier turns (e.g. dropping old reasoning) cannot
    be trained this way, and the error says so."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SFTDataError(f"{where}: a chat record needs a non-empty 'messages' list")
    tools = record.get("tools") or None
    full = _render(tokenizer, messages, tools, template, generation_prompt=False)
    spans: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        before = _render(tokenizer, messages[:i], tools, template, generation_prompt=True)
        through = _render(tokenizer, messages[: i + 1], tools, template, generation_prompt=False)
        if not (full.startswith(before) and full.startswith(through)):
            raise SFTDataError(
                f"{where}: the chat template does not render message {i} as a prefix of the "
                "whole conversation, so its tokens cannot be told apart; export as tokens"
            )
        spans.append((len(before), len(through.rstrip())))
    if not spans:
        raise SFTDataError(f"{where}: the conversation has no assistant message to train on")
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    labels = [IGNORE_INDEX] * len(ids)
    for k, (start, end) in enumerate(encoded["offset_mapping"]):
        if end > start and any(s <= start and end <= e for s, e in spans):
            labels[k] = ids[k]
    return ids, labels


def token_example(record: dict[str, Any], *, where: str) -> tuple[list[int], list[int]]:
    ids, labels = record.get("input_ids"), record.get("labels")
    if not isinstance(ids, list) or not isinstance(labels, list) or len(ids) != len(labels):
        raise SFTDataError(f"{where}: a token record needs 'input_ids' and 'labels' of one length")
    if not all(isinstance(t, int) for t in ids) or not all(isinstance(t, int) for t in labels):
        raise SFTDataError(f"{where}: 'input_ids' and 'labels' must hold integers")
    return ids, labels


def records_load(
    path: str | Path,
    tokenizer: Any,
    *,
    chat_template: str | None,
    max_length: int,
    episode_of_line: Sequence[int] | None = None,
) -> Loaded:
    """Every line of the export as an example, cut to `max_length` tokens; examples left
    with no trained token are dropped and counted."""
    source = Path(path)
    if not source.is_file():
        raise SFTDataError(f"the export file {source} does not exist")
    counts = {INPUT_TOKENS: 0, INPUT_CHAT: 0, "truncated": 0, "dropped_no_target": 0, "lines": 0}
    examples: list[Example] = []
    with source.open(encoding="utf-8") as fh:
        for line_no, raw in enumerate(fh):
            if not raw.strip():
                continue
            counts["lines"] += 1
            where = f"{source.name} line {line_no + 1}"
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise SFTDataError(f"{where}: not JSON ({exc})") from exc
            if not isinstance(record, dict):
                raise SFTDataError(f"{where}: a record must be a JSON object")
            if "input_ids" in record:
                ids, labels = token_example(record, where=where)
                kind = INPUT_TOKENS
            else:
                ids, labels = chat_example(record, tokenizer, chat_template, where=where)
                kind = INPUT_CHAT
            if len(ids) > max_length:
                ids, labels = ids[:max_length], labels[:max_length]
                counts["truncated"] += 1
            if all(t == IGNORE_INDEX for t in labels):
                counts["dropped_no_target"] += 1
                continue
            counts[kind] += 1
            episode = line_no
            if episode_of_line is not None and line_no < len(episode_of_line):
                episode = int(episode_of_line[line_no])
            examples.append(Example(ids, labels, episode, line_no, kind))
    if not examples:
        raise SFTDataError(
            f"{source.name}: no record with a token to train on ({counts['lines']} lines): "
            "approve episodes and export them first"
        )
    return Loaded(examples, counts)


def split_by_episode(
    examples: list[Example], eval_fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """A held-out share of the episodes (at least one when the fraction is above zero),
    chosen by a seeded shuffle; every record of an episode lands on the same side."""
    episodes = sorted({e.episode for e in examples})
    if eval_fraction <= 0:
        return examples, []
    if len(episodes) < 2:
        raise SFTDataError(
            f"holding out an eval split needs at least 2 episodes, the export has "
            f"{len(episodes)}: approve more, or set eval_fraction to 0"
        )
    random.Random(seed).shuffle(episodes)
    held = set(episodes[: max(1, round(eval_fraction * len(episodes)))])
    train = [e for e in examples if e.episode not in held]
    return train, [e for e in examples if e.episode in held]
