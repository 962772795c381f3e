"""Field checks shared by the readers: each returns the value or names file, line and field.

Line-level reading (length limit, UTF-8, BOM) comes from harness.beir.iter_lines; record
validation lives here because the importer also rejects what the database cannot store
(NUL characters, lone surrogates) and needs the line of every record for its messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness_app.importers.records import BenchmarkFormatError

MAX_GRADE = 32767  # a small integer column


def storable(path: Path | str, line: int, name: str, value: str) -> str:
    """`value` unless PostgreSQL could not store it (NUL, lone surrogate)."""
    if "\x00" in value:
        raise BenchmarkFormatError(path, line, "contains a NUL character", name)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            char = f"U+{ord(value[exc.start]):04X}"
            raise BenchmarkFormatError(
                path, line, f"contains a lone surrogate {char}", name
            ) from None
    return value


def string_field(
    path: Path | str, line: int, row: dict[str, Any], name: str, default: str | None = None
) -> str:
    if name not in row:
        if default is None:
            raise BenchmarkFormatError(path, line, "missing", name)
        return default
    value = row[name]
    if not isinstance(value, str):
        raise BenchmarkFormatError(
            path, line, f"must be a string, got {type(value).__name__}", name
        )
    return storable(path, line, name, value)


def identifier_field(path: Path | str, line: int, row: dict[str, Any], name: str) -> str:
    value = string_field(path, line, row, name)
    if not value.strip():
        raise BenchmarkFormatError(path, line, "is blank", name)
    if len(value) > 500:
        raise BenchmarkFormatError(path, line, "is longer than 500 characters", name)
    return value


def json_object(path: Path | str, line: int, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkFormatError(
            path, line, f"malformed JSON: {exc.msg} at column {exc.colno}"
        ) from None
    if not isinstance(value, dict):
        raise BenchmarkFormatError(
            path, line, f"expected a JSON object, got {type(value).__name__}"
        )
    return value


def metadata_field(path: Path | str, line: int, row: dict[str, Any]) -> dict[str, Any]:
    metadata = row.get("metadata")
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        message = f"must be an object, got {type(metadata).__name__}"
        raise BenchmarkFormatError(path, line, message, "metadata")
    for text in _json_strings(metadata):  # a JSON column can't hold them either
        storable(path, line, "metadata", text)
    return metadata


def _json_strings(value: Any) -> Iterator[str]:
    """Every string in a parsed JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)


def grade_field(path: Path | str, line: int, score: str) -> int:
    score = score.strip()
    if not (score.isascii() and score.isdigit() and int(score) <= MAX_GRADE):
        message = f"must be an integer from 0 to {MAX_GRADE}, got {score!r}"
        raise BenchmarkFormatError(path, line, message, "score")
    return int(score)


def answer_text(metadata: dict[str, Any]) -> str:
    """metadata["answer"] as one string; a list of aliases is joined with " | "."""
    answer = metadata.get("answer", "")
    if isinstance(answer, list):
        return " | ".join(str(a) for a in answer)
    return "" if answer is None else str(answer)
