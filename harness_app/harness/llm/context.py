"""The `rerender` context: every call's prompt rebuilt from scratch, as Harness-1 does.

Each call sees, in order:

1. the system prompt (or the group's prefix messages); the tools go with the request;
2. one user message: the question, then the WORKINGMEMORY snapshot frozen at turn n−5
   (the observation the oldest kept turn answered);
3. the last 5 turns: each assistant reply, its reasoning cut to 300 characters except in
   the latest turn (the calls themselves are kept whole), and its tool results.

A budget marker `[Context: used/LIMIT]`, the prompt's length in real tokens, follows each
search result of the latest turn (or its last result when it ran no search), flagged at
60 / 75 / 90 % of LIMIT; the 90 % flag says to call end_search now. A turn keeps the
markers it was shown with when it becomes an older turn.

When the prompt is over LIMIT, truncation passes run in this order, each re-counted, until
it fits (`PASSES`):

1. `older_results`: every tool result but the latest turn's is cut to 500 characters;
2. `drop_oldest`: the oldest kept turn is dropped, one at a time down to the latest turn,
   and the snapshot moves forward to the WORKINGMEMORY that followed it, so what the
   dropped turn did is still summarised;
3. `shrink_snapshot`: the snapshot is cut to 1,500 characters;
4. `latest_results`: the latest turn's tool results are cut to 1,000 characters;
5. `hard_cut`: the snapshot goes, and the latest results are cut to 200 characters.

If the prompt is still over LIMIT the policy ends the episode with `context_budget`.
The counting itself (the tokenizer) is the policy's; this module only builds messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from harness_app.harness.tools import SEARCH_TOOLS

KEPT_TURNS = 5
REASONING_CHARS = 300
PASSES = ("older_results", "drop_oldest", "shrink_snapshot", "latest_results", "hard_cut")
OLDER_RESULT_CHARS = 500
SNAPSHOT_CHARS = 1500
LATEST_RESULT_CHARS = 1000
HARD_CUT_CHARS = 200

_HERMES_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)


@dataclass
class Result:
    """One thing the harness answered: a tool message (with its call id) or, for a turn
    whose reply held no readable call, a user message."""

    content: str
    name: str = ""
    call_id: str = ""  # "" for a user message

    @property
    def is_search(self) -> bool:
        return self.name in SEARCH_TOOLS


@dataclass
class Entry:
    """One past turn: the assistant's reply and what the harness answered."""

    turn: int  # the observation the reply answered
    reply: dict[str, Any]
    results: list[Result] = field(default_factory=list)
    marker: str = ""  # the budget marker it was shown with, frozen once shown


@dataclass
class View:
    """How much of the history the next prompt shows; the truncation passes narrow it."""

    kept: int = KEPT_TURNS
    older_result_chars: int | None = None
    snapshot_chars: int | None = None
    latest_result_chars: int | None = None
    snapshot: bool = True


def cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit].rstrip() + "…"


def cut_reasoning(
    reply: dict[str, Any], parser: str, limit: int = REASONING_CHARS
) -> dict[str, Any]:
    """The reply with its prose cut to `limit` characters and its calls kept whole.

    Hermes calls are `<tool_call>` blocks inside the text, so only the text around them is
    cut; other families' calls travel as `tool_calls`, which the template renders."""
    content = str(reply.get("content") or "")
    if parser == "hermes" and not reply.get("tool_calls"):
        blocks = _HERMES_BLOCK.findall(content)
        prose = cut(_HERMES_BLOCK.sub("", content).strip(), limit)
        content = "\n".join(p for p in (prose, *blocks) if p)
    else:
        content = cut(content, limit)
    return {**reply, "content": content}


def narrower(view: View, step: str, entries: int) -> View | None:
    """The view after one application of truncation pass `step`; None when it cannot
    narrow any further."""
    if step == "older_results":
        if view.older_result_chars is not None or min(view.kept, entries) < 2:
            return None
        return _replace(view, older_result_chars=OLDER_RESULT_CHARS)
    if step == "drop_oldest":
        shown = min(view.kept, entries)
        return _replace(view, kept=shown - 1) if shown > 1 else None
    if step == "shrink_snapshot":
        if view.snapshot_chars is not None:
            return None
        return _replace(view, snapshot_chars=SNAPSHOT_CHARS)
    if step == "latest_results":
        if view.latest_result_chars is not None:
            return None
        return _replace(view, latest_result_chars=LATEST_RESULT_CHARS)
    if step == "hard_cut":
        if not view.snapshot:
            return None
        return _replace(view, snapshot=False, latest_result_chars=HARD_CUT_CHARS)
    raise ValueError(f"unknown truncation pass {step!r}; use one of {', '.join(PASSES)}")


def _replace(view: View, **changes: Any) -> View:
    return View(**{**view.__dict__, **changes})


def render(
    *,
    head: list[dict[str, Any]],
    question: str,
    snapshots: dict[int, str],
    entries: list[Entry],
    view: View,
    parser: str,
    marker: str,
    cut_replies: bool = True,
) -> tuple[list[dict[str, Any]], int]:
    """The prompt's messages under `view`, and the turn its snapshot is frozen at.

    `marker` goes after the latest turn's search results (its last result without one);
    older turns show the marker they were shown with. `cut_replies=False` keeps older
    replies whole (a JSON action has no reasoning to cut)."""
    kept = entries[-view.kept :] if view.kept else []
    frozen = kept[0].turn if kept else max(snapshots, default=0)
    opening = f"QUESTION: {question}"
    if view.snapshot:
        wm = cut(snapshots.get(frozen, ""), view.snapshot_chars)
        opening += f"\n\nWORKINGMEMORY as of turn {frozen}:\n{wm}"
    messages = [*head, {"role": "user", "content": opening}]
    for number, entry in enumerate(kept):
        latest = number == len(kept) - 1
        reply = entry.reply if latest or not cut_replies else cut_reasoning(entry.reply, parser)
        messages.append(reply)
        limit = view.latest_result_chars if latest else view.older_result_chars
        shown = marker if latest else entry.marker
        messages.extend(_results(entry.results, limit, shown))
    return messages, frozen


def _results(results: list[Result], limit: int | None, marker: str) -> list[dict[str, Any]]:
    if not results:
        return []
    marked = {i for i, r in enumerate(results) if r.is_search} or {len(results) - 1}
    tools: list[dict[str, Any]] = []
    texts: list[str] = []  # results without a call id go together in one user message
    for i, result in enumerate(results):
        content = cut(result.content, limit)
        if marker and i in marked:
            content = f"{content}\n{marker}"
        if result.call_id:
            tools.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
        else:
            texts.append(content)
    return tools + ([{"role": "user", "content": "\n\n".join(texts)}] if texts else [])
