"""Read message prefixes: one train.jsonl line per task, {"query_id", "messages"}.

A rollout can start from a conversation already under way (an SFT example, a replayed
trajectory). Bad lines are refused whole, naming the file, line and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROLES = frozenset({"system", "user", "assistant", "tool"})


class PrefixFileError(ValueError):
    pass


def _message_problem(message: Any) -> str:
    if not isinstance(message, dict):
        return "is not an object"
    if message.get("role") not in ROLES:
        return f"has role {message.get('role')!r}; use one of {sorted(ROLES)}"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return "has non-string content"
    return ""


def _parse_line(where: str, raw: str) -> tuple[str, list[dict[str, Any]]]:
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise PrefixFileError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise PrefixFileError(f"{where}: expected an object with query_id and messages")
    query_id = row.get("query_id")
    if not isinstance(query_id, str) or not query_id:
        raise PrefixFileError(f"{where}: field 'query_id' must be a non-empty string")
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PrefixFileError(f"{where}: field 'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        problem = _message_problem(message)
        if problem:
            raise PrefixFileError(f"{where}: messages[{i}] {problem}")
    return query_id, messages


def prefixes_read(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Map query id → starting messages; one line per query id."""
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise PrefixFileError(f"{path}: cannot open ({exc.strerror})") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                query_id, messages = _parse_line(where, raw)
            except UnicodeDecodeError:
                raise PrefixFileError(f"{where}: not UTF-8") from None
            if query_id in out:
                raise PrefixFileError(f"{where}: query_id {query_id!r} appears twice")
            out[query_id] = messages
    if not out:
        raise PrefixFileError(f"{path.name}: no prefixes in the file")
    return out
