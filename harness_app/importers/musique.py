"""MuSiQue JSONL (answerable or full): one question a line with its 20 paragraphs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_app.importers.fields import identifier_field, metadata_field, string_field
from harness_app.importers.paragraphs import (
    Paragraph,
    ParagraphSource,
    QuestionRecord,
    answer_in_text,
    string_list,
)
from harness_app.importers.records import BenchmarkFormatError, QueryRecord


class MuSiQueSource(ParagraphSource):
    """MuSiQue as a benchmark.

    Corpus: every paragraph of every imported question, one document per distinct
    (title, text). Qrels: the supporting paragraphs; grade 2 for one that holds the answer
    (the answer or an alias occurs in it, or it supports the last hop of
    question_decomposition), 1 for the others. Questions marked `answerable: false` (the
    "full" files) are checked, then skipped, and the result says how many.
    """

    fmt = "musique"
    label = "MuSiQue"
    id_field = "id"

    def _skipped(self, count: int) -> str:
        return f"{count} unanswerable question(s) (answerable: false) were skipped"

    def _record(self, line: int, row: dict[str, Any]) -> QuestionRecord:
        path = self.corpus_path
        qid = identifier_field(path, line, row, "id")
        answer = string_field(path, line, row, "answer")
        aliases = string_list(path, line, row, "answer_aliases")
        answerable = row.get("answerable", True)
        if not isinstance(answerable, bool):
            message = f"must be true or false, got {type(answerable).__name__}"
            raise BenchmarkFormatError(path, line, message, "answerable")
        paragraphs, positions, supporting = _paragraphs(path, line, row.get("paragraphs"))
        decomposition = _decomposition(path, line, row, positions)
        last = decomposition[-1]["paragraph_support_idx"] if decomposition else None
        last_position = positions.get(last) if last is not None else None
        positions_judged = set(supporting)
        if last_position is not None:  # the last hop's paragraph holds the answer
            positions_judged.add(last_position)
        judged = []
        for position in sorted(positions_judged):
            para = paragraphs[position]
            holds = position == last_position or answer_in_text(
                [answer, *aliases], para.title, para.text
            )
            judged.append((position, 2 if holds else 1))
        metadata = {
            "answer": answer,
            "answer_aliases": aliases,
            "question_decomposition": decomposition,
        }
        query = QueryRecord(
            qid,
            string_field(path, line, row, "question"),
            answer,
            metadata_field(path, line, {"metadata": metadata}),
        )
        return QuestionRecord(line, query, paragraphs, tuple(judged), skipped=not answerable)


def _paragraphs(
    path: Path, line: int, value: Any
) -> tuple[tuple[Paragraph, ...], dict[int, int], list[int]]:
    """The paragraphs, their positions by `idx`, and the supporting positions."""
    if not isinstance(value, list):
        got = "missing" if value is None else f"must be a list, got {type(value).__name__}"
        raise BenchmarkFormatError(path, line, got, "paragraphs")
    paragraphs: list[Paragraph] = []
    positions: dict[int, int] = {}
    supporting: list[int] = []
    for position, item in enumerate(value):
        name = f"paragraphs[{position}]"
        if not isinstance(item, dict):
            raise BenchmarkFormatError(path, line, "must be an object", name)
        idx = item.get("idx")
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise BenchmarkFormatError(path, line, "must be an integer", f"{name}.idx")
        if idx in positions:
            message = f"duplicate idx {idx} (first in paragraphs[{positions[idx]}])"
            raise BenchmarkFormatError(path, line, message, f"{name}.idx")
        positions[idx] = position
        title = string_field(path, line, item, "title")
        text = string_field(path, line, item, "paragraph_text")
        is_supporting = item.get("is_supporting", False)
        if not isinstance(is_supporting, bool):
            message = f"must be true or false, got {type(is_supporting).__name__}"
            raise BenchmarkFormatError(path, line, message, f"{name}.is_supporting")
        if is_supporting:
            supporting.append(position)
        paragraphs.append(Paragraph(title, text))
    return tuple(paragraphs), positions, supporting


def _decomposition(
    path: Path, line: int, row: dict[str, Any], positions: dict[int, int]
) -> list[dict[str, Any]]:
    """question_decomposition as in the file, each hop's paragraph_support_idx checked."""
    value = row.get("question_decomposition", [])
    if not isinstance(value, list):
        message = f"must be a list, got {type(value).__name__}"
        raise BenchmarkFormatError(path, line, message, "question_decomposition")
    for i, hop in enumerate(value):
        name = f"question_decomposition[{i}]"
        if not isinstance(hop, dict):
            raise BenchmarkFormatError(path, line, "must be an object", name)
        support = hop.get("paragraph_support_idx")
        if support is None:
            continue
        if not isinstance(support, int) or isinstance(support, bool):
            message = "must be an integer or null"
            raise BenchmarkFormatError(path, line, message, f"{name}.paragraph_support_idx")
        if support not in positions:
            message = f"no paragraph has idx {support}"
            raise BenchmarkFormatError(path, line, message, f"{name}.paragraph_support_idx")
    return value
