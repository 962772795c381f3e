"""Reads for the harness app: querysets and plain data for pages, exports and workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, QuerySet

from harness_app.models import Benchmark, Document, ImportJob, Qrel, Query

STREAM_CHUNK = 2_000
QUERIES_PER_PAGE = 20
BENCHMARKS_PER_PAGE = 25


def benchmark_list_page(*, page: int | str | None) -> Page[Benchmark]:
    """Benchmarks by name with their corpus, counts and index status: two queries."""
    paginator = Paginator(Benchmark.objects.for_list(), BENCHMARKS_PER_PAGE)
    return paginator.get_page(page)


def benchmark_get(*, pk: int) -> Benchmark | None:
    return Benchmark.objects.for_list().filter(pk=pk).first()


def benchmark_queries_page(*, benchmark: Benchmark, page: int | str | None) -> Page[Query]:
    """A page of queries, each with its qrels and their document ids: three queries."""
    qrels = Qrel.objects.select_related("document").only(
        "query", "grade", "document", "document__external_id", "document__title"
    )
    queries = Query.objects.filter(benchmark=benchmark).prefetch_related(
        Prefetch("qrels", queryset=qrels.order_by("-grade", "pk"))
    )
    return Paginator(queries.order_by("pk"), QUERIES_PER_PAGE).get_page(page)


def corpus_sample(*, corpus_id: int, limit: int = 5) -> list[Document]:
    """The first documents of a corpus, to show what it holds."""
    return list(Document.objects.filter(corpus_id=corpus_id).order_by("pk")[:limit])


def import_jobs_recent(*, limit: int = 10) -> list[ImportJob]:
    return list(ImportJob.objects.recent(limit))


@dataclass(frozen=True)
class JobProgress:
    phase: str
    documents: int
    total_documents: int
    rate: int

    @property
    def percent(self) -> int | None:
        if not self.total_documents:
            return None
        return min(100, round(100 * self.documents / self.total_documents))


def import_job_progress(job: ImportJob) -> JobProgress | None:
    """The live progress a running import writes beside its upload, if there is any yet."""
    if not job.is_active:
        return None
    try:
        body: dict[str, Any] = json.loads(
            (Path(job.upload_path).parent / "progress.json").read_text()
        )
        return JobProgress(
            phase=str(body["phase"]),
            documents=int(body["documents"]),
            total_documents=int(body["total_documents"]),
            rate=int(body["rate"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not started yet, or just finished and cleaned up


# --- streams for exports --------------------------------------------------------------------


def corpus_document_rows(*, corpus_id: int) -> Iterator[tuple[str, str, str]]:
    """(id, title, text) in import order, streamed."""
    rows: QuerySet[Document, tuple[str, str, str]] = (
        Document.objects.filter(corpus_id=corpus_id)
        .order_by("pk")
        .values_list("external_id", "title", "text")
    )
    return rows.iterator(chunk_size=STREAM_CHUNK)


def benchmark_query_rows(*, benchmark_id: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    rows: QuerySet[Query, tuple[str, str, dict[str, Any]]] = (
        Query.objects.filter(benchmark_id=benchmark_id)
        .order_by("pk")
        .values_list("external_id", "text", "metadata")
    )
    return rows.iterator(chunk_size=STREAM_CHUNK)


def benchmark_qrel_rows(*, benchmark_id: int) -> Iterator[tuple[str, str, int]]:
    rows: QuerySet[Qrel, tuple[str, str, int]] = (
        Qrel.objects.filter(query__benchmark_id=benchmark_id)
        .order_by("pk")
        .values_list("query__external_id", "document__external_id", "grade")
    )
    return rows.iterator(chunk_size=STREAM_CHUNK)
