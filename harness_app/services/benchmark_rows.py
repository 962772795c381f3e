"""The write pass of an import: a source's rows into the database, in batches.

Everything here runs inside the caller's transaction (services.benchmarks._benchmark_store).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, models

from harness_app.harness.retrieval.store import ContentHasher
from harness_app.importers.records import (
    PROGRESS_EVERY,
    ImportProgress,
    Progress,
    QrelRecord,
    Source,
)
from harness_app.importers.scan import qrel_error
from harness_app.models import Document, Qrel, Query

BATCH_SIZE = 5_000  # rows per COPY or bulk_create


class _RowWriter:
    """Buffers rows for one table and writes each full batch.

    PostgreSQL gets COPY through the raw psycopg connection (several times faster than
    INSERT); other databases get bulk_create. Both run inside the caller's transaction.
    """

    def __init__(
        self, model: type[models.Model], fields: Sequence[str], *, batch_size: int = BATCH_SIZE
    ):
        self.model = model
        self.fields = tuple(fields)
        self.batch_size = batch_size
        self.rows: list[tuple[Any, ...]] = []
        self.written = 0

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        if connection.vendor == "postgresql":
            self._copy()
        else:
            objects = [self.model(**dict(zip(self.fields, row, strict=True))) for row in self.rows]
            self.model._default_manager.bulk_create(objects, batch_size=self.batch_size)
        self.written += len(self.rows)
        self.rows = []

    def _copy(self) -> None:
        meta = self.model._meta
        quote = connection.ops.quote_name
        by_attname = {f.attname: f for f in meta.concrete_fields}
        fields = [by_attname[name] for name in self.fields]
        columns = ", ".join(quote(f.column) for f in fields)
        sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN (FORMAT BINARY)"
        # Binary COPY needs each column's type: "varchar(500)" -> "varchar".
        types = [str(f.db_type(connection)).split("(")[0] for f in fields]
        connection.ensure_connection()
        with connection.connection.cursor() as cursor, cursor.copy(sql) as copy:
            copy.set_types(types)
            for row in self.rows:
                copy.write_row(row)


def documents_write(
    source: Source, *, corpus_id: int, total: int, progress: Progress | None = None
) -> str:
    """Stream the documents into `corpus_id`; returns the content hash of what was written.

    Hashing again costs little and proves the file did not change since the check pass.
    """
    state = ImportProgress(phase="writing", total_documents=total)
    writer = _RowWriter(Document, ("corpus_id", "external_id", "title", "text"))
    hasher = ContentHasher()
    for doc in source.documents():
        hasher.add(doc)
        writer.add((corpus_id, doc.doc_id, doc.title, doc.text))
        if progress and hasher.documents % PROGRESS_EVERY == 0:
            state.documents = hasher.documents
            progress(state)
    writer.flush()
    state.documents = writer.written
    if progress:
        progress(state)
    return hasher.hexdigest()


def queries_write(source: Source, *, benchmark_id: int) -> int:
    # bulk_create on every backend: queries are few next to documents, and the ORM
    # takes care of the JSON column.
    batch: list[Query] = []
    written = 0
    for record in source.queries():
        batch.append(
            Query(
                benchmark_id=benchmark_id,
                external_id=record.external_id,
                text=record.text,
                answer=record.answer,
                metadata=record.metadata,
            )
        )
        if len(batch) >= BATCH_SIZE:
            written += len(Query.objects.bulk_create(batch))
            batch = []
    return written + len(Query.objects.bulk_create(batch))


def qrels_write(source: Source, *, benchmark_id: int, corpus_id: int) -> int:
    writer = _RowWriter(Qrel, ("query_id", "document_id", "grade"))
    pending: list[QrelRecord] = []
    for qrel in source.qrels():
        pending.append(qrel)
        if len(pending) >= BATCH_SIZE:
            _qrels_resolve(pending, writer, benchmark_id, corpus_id)
            pending = []
    _qrels_resolve(pending, writer, benchmark_id, corpus_id)
    writer.flush()
    return writer.written


def _qrels_resolve(
    pending: list[QrelRecord], writer: _RowWriter, benchmark_id: int, corpus_id: int
) -> None:
    """Map a batch of judgements' external ids to primary keys, one query per table."""
    if not pending:
        return
    queries = dict(
        Query.objects.filter(
            benchmark_id=benchmark_id, external_id__in={q.query_id for q in pending}
        ).values_list("external_id", "pk")
    )
    documents = dict(
        Document.objects.filter(
            corpus_id=corpus_id, external_id__in={q.doc_id for q in pending}
        ).values_list("external_id", "pk")
    )
    for qrel in pending:
        if qrel.doc_id not in documents:  # a 64-bit hash collision fooled the check pass
            raise qrel_error(qrel, f"unknown document {qrel.doc_id!r}", qrel.doc_field)
        writer.add((queries[qrel.query_id], documents[qrel.doc_id], qrel.grade))
