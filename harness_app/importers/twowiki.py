"""2WikiMultihopQA: a JSON array (the official files) or JSONL of questions with their context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_app.importers.fields import (
    identifier_field,
    metadata_field,
    storable,
    string_field,
)
from harness_app.importers.paragraphs import (
    YES_NO,
    Paragraph,
    ParagraphSource,
    QuestionRecord,
    answer_in_text,
    join_sentences,
)
from harness_app.importers.records import BenchmarkFormatError, QueryRecord


class TwoWikiSource(ParagraphSource):
    """2WikiMultihopQA as a benchmark.

    Corpus: every context paragraph (sentences joined by spaces), one document per distinct
    (title, text). Qrels: the titles of supporting_facts, each resolved in the question's
    own context; grade 2 where the answer occurs in the paragraph (or, for a yes/no
    answer, every supporting paragraph), 1 for the others.
    """

    fmt = "2wikimultihopqa"
    label = "2WikiMultihopQA"
    id_field = "_id"

    def _record(self, line: int, row: dict[str, Any]) -> QuestionRecord:
        path = self.corpus_path
        qid = identifier_field(path, line, row, "_id")
        answer = string_field(path, line, row, "answer")
        paragraphs = _context(path, line, row.get("context"))
        titles: dict[str, int] = {}
        for position, para in enumerate(paragraphs):
            titles.setdefault(para.title, position)
        judged = []
        for title in _supporting_titles(path, line, row.get("supporting_facts"), titles):
            para = paragraphs[titles[title]]
            holds = answer.strip().lower() in YES_NO or answer_in_text([answer], title, para.text)
            judged.append((titles[title], 2 if holds else 1))
        metadata: dict[str, Any] = {"answer": answer}
        if "type" in row:
            metadata["type"] = string_field(path, line, row, "type")
        if "evidences" in row:
            if not isinstance(row["evidences"], list):
                message = f"must be a list, got {type(row['evidences']).__name__}"
                raise BenchmarkFormatError(path, line, message, "evidences")
            metadata["evidences"] = row["evidences"]
        query = QueryRecord(
            qid,
            string_field(path, line, row, "question"),
            answer,
            metadata_field(path, line, {"metadata": metadata}),
        )
        return QuestionRecord(line, query, paragraphs, tuple(judged))


def _context(path: Path, line: int, context: Any) -> tuple[Paragraph, ...]:
    if not isinstance(context, list):
        got = "missing" if context is None else f"must be a list, got {type(context).__name__}"
        raise BenchmarkFormatError(path, line, got, "context")
    paragraphs = []
    for i, item in enumerate(context):
        name = f"context[{i}]"
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise BenchmarkFormatError(path, line, "must be [title, [sentences]]", name)
        title, sentences = item
        if not (isinstance(sentences, list) and all(isinstance(s, str) for s in sentences)):
            raise BenchmarkFormatError(path, line, "sentences must be a list of strings", name)
        text = storable(path, line, name, join_sentences(sentences))
        paragraphs.append(Paragraph(storable(path, line, name, title), text))
    return tuple(paragraphs)


def _supporting_titles(path: Path, line: int, facts: Any, titles: dict[str, int]) -> list[str]:
    """The supporting titles in order, each once; each must be in the question's context."""
    if not isinstance(facts, list):
        got = "missing" if facts is None else f"must be a list, got {type(facts).__name__}"
        raise BenchmarkFormatError(path, line, got, "supporting_facts")
    found: dict[str, None] = {}
    for i, fact in enumerate(facts):
        name = f"supporting_facts[{i}]"
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
            raise BenchmarkFormatError(path, line, "must be [title, sentence index]", name)
        if not isinstance(fact[1], int) or isinstance(fact[1], bool):
            raise BenchmarkFormatError(path, line, "sentence index must be an integer", name)
        if fact[0] not in titles:
            message = f"title {fact[0]!r} is not in this question's context"
            raise BenchmarkFormatError(path, line, message, name)
        found[fact[0]] = None
    return list(found)
