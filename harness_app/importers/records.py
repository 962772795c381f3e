"""What every benchmark source yields, and the errors an import raises.

Nothing in harness_app.importers writes to the database: its readers and its check pass are
the "reading and checking" half of an import, and harness_app.services.benchmarks the writing
half.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness_app.harness.beir import BeirFormatError
from harness_app.harness.types import Document

PROGRESS_EVERY = 2_000


class ImportRejected(Exception):
    """The import was refused before or while writing; the database is unchanged."""


class BenchmarkFormatError(BeirFormatError):
    """A benchmark file is malformed; the message names the file, line and field."""

    def __init__(self, path: Path | str, line: int, message: str, field: str = "") -> None:
        self.detail = message
        super().__init__(path, line, message, field)


@dataclass(frozen=True, slots=True)
class QueryRecord:
    external_id: str
    text: str
    answer: str
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class QrelRecord:
    query_id: str
    doc_id: str
    grade: int
    path: str  # where the judgement came from, for error messages
    line: int
    query_field: str = "query-id"  # the field an unknown query or document is reported in
    doc_field: str = "corpus-id"


@dataclass
class ImportProgress:
    phase: str  # "checking" (validate and hash) or "writing"
    documents: int = 0
    total_documents: int = 0  # known once the check pass is over
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        """Documents per second in this phase."""
        return self.documents / max(time.monotonic() - self.started, 1e-9)


Progress = Callable[[ImportProgress], None]


class Source(Protocol):
    """One benchmark's records; each method opens a fresh pass over the files."""

    fmt: str
    corpus_path: Path
    queries_path: Path
    qrels_path: Path
    warnings: list[str]

    def documents(self) -> Iterator[Document]: ...

    def queries(self) -> Iterator[QueryRecord]: ...

    def qrels(self) -> Iterator[QrelRecord]: ...

    def duplicate_document(self) -> BenchmarkFormatError | None: ...
