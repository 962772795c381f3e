"""Benchmarks written back out as BEIR folders."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness_app import selectors
from harness_app.harness.beir import QRELS_HEADER
from harness_app.models import Benchmark


@dataclass(frozen=True)
class ExportCounts:
    documents: int
    queries: int
    qrels: int


def benchmark_export(*, benchmark: Benchmark, directory: Path) -> ExportCounts:
    """Write the benchmark as a BEIR folder: rows in import order, so a round trip is exact.

    Each file is written beside its target and renamed into place when complete.
    """
    (directory / "qrels").mkdir(parents=True, exist_ok=True)
    documents = _lines_write(
        directory / "corpus.jsonl",
        (
            _json_line({"_id": doc_id, "title": title, "text": text})
            for doc_id, title, text in selectors.corpus_document_rows(corpus_id=benchmark.corpus_id)
        ),
    )
    queries = _lines_write(
        directory / "queries.jsonl",
        (
            _json_line({"_id": query_id, "text": text, "metadata": metadata})
            for query_id, text, metadata in selectors.benchmark_query_rows(
                benchmark_id=benchmark.pk
            )
        ),
    )
    qrel_lines = (
        f"{query_id}\t{doc_id}\t{grade}\n"
        for query_id, doc_id, grade in selectors.benchmark_qrel_rows(benchmark_id=benchmark.pk)
    )
    header = "\t".join(QRELS_HEADER) + "\n"
    qrels = _lines_write(directory / "qrels" / f"{benchmark.split}.tsv", qrel_lines, header=header)
    return ExportCounts(documents=documents, queries=queries, qrels=qrels)


def _json_line(row: dict[str, object]) -> str:
    return json.dumps(row, ensure_ascii=False) + "\n"


def _lines_write(path: Path, lines: Iterable[str], *, header: str = "") -> int:
    partial = path.with_name(path.name + ".partial")
    count = 0
    with open(partial, "w", encoding="utf-8", newline="") as sink:
        sink.write(header)
        for line in lines:
            sink.write(line)
            count += 1
    os.replace(partial, path)
    return count
