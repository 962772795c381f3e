"""Writes for the harness app: every state change goes through a function here."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group, User
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, connection, models, transaction
from django.db.models import ProtectedError, RestrictedError
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import importers, queues, selectors
from harness_app.harness.beir import QRELS_HEADER, BeirFormatError
from harness_app.harness.retrieval.store import ContentHasher
from harness_app.importers import ImportRejected, Progress
from harness_app.models import (
    Benchmark,
    BenchmarkSource,
    Corpus,
    Document,
    ImportJob,
    ImportStatus,
    IndexStatus,
    Qrel,
    Query,
)
from harness_app.roles import Role

logger = logging.getLogger(__name__)

BATCH_SIZE = 5_000  # rows per COPY or bulk_create


@transaction.atomic
def user_ensure(
    *, username: str, password: str, role: Role | None, is_staff: bool = False
) -> tuple[AbstractUser, bool]:
    """Create the user if missing and give it exactly `role`; returns (user, created).

    An existing user keeps its password: re-running the demo set-up must not reset a
    password somebody changed.
    """
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_password(password)
    user.is_staff = is_staff or user.is_staff
    user.save()
    role_groups = Group.objects.filter(name__in=Role.values)
    user.groups.remove(*role_groups)
    if role is not None:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    return user, created


# --- benchmarks -------------------------------------------------------------------------


class BenchmarkExists(ImportRejected):
    """The name is taken by a benchmark with other content and --replace was not given."""


@dataclass(frozen=True)
class ImportResult:
    status: str  # "created", "replaced" or "unchanged"
    benchmark_id: int
    corpus_id: int
    corpus_name: str
    corpus_reused: bool
    documents: int
    queries: int
    qrels: int
    warnings: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"

    def describe(self, name: str) -> str:
        counts = f"{self.documents:,} documents, {self.queries:,} queries, {self.qrels:,} qrels"
        if not self.changed:
            text = f"Benchmark {name!r} is unchanged (same content hash): nothing was written."
        else:
            corpus = "reused corpus" if self.corpus_reused else "new corpus"
            verb = "Replaced" if self.status == "replaced" else "Imported"
            text = f"{verb} benchmark {name!r}: {counts} ({corpus} {self.corpus_name!r})."
        return " ".join([text, *self.warnings])


def benchmark_import(
    *,
    path: Path | str,
    name: str,
    fmt: str,
    split: str = "test",
    replace: bool = False,
    progress: Progress | None = None,
    source: str | None = None,
    created_by: User | None = None,
) -> ImportResult:
    """Import a BEIR folder or HotpotQA file as benchmark `name`, all or nothing.

    The files are checked and hashed first, without touching the database; the rows are
    then written in one transaction, so on any error the database is exactly as it was.
    Identical content under the same name is a no-op. With `replace`, the old benchmark
    (and its corpus, if nothing else uses it) is swapped out in that same transaction.
    """
    name = _benchmark_name(name)
    reader = importers.source_open(Path(path), fmt=fmt, split=split)
    scan = importers.source_scan(reader, split=split, progress=progress)
    try:
        return _benchmark_store(
            reader=reader,
            scan=scan,
            name=name,
            split=split,
            replace=replace,
            origin=source or reader.fmt,
            created_by=created_by,
            progress=progress,
        )
    except IntegrityError as exc:  # the checks passed, so another import raced this one
        raise ImportRejected(
            f"another import wrote {name!r} at the same time ({exc}); try again"
        ) from None


def _benchmark_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise ImportRejected("a benchmark name needs 1 to 200 characters")
    return name


@transaction.atomic
def _benchmark_store(
    *,
    reader: importers.Source,
    scan: importers.ScanResult,
    name: str,
    split: str,
    replace: bool,
    origin: str,
    created_by: User | None,
    progress: Progress | None,
) -> ImportResult:
    existing = Benchmark.objects.select_for_update().filter(name=name).first()
    if existing is not None and existing.content_hash == scan.benchmark_hash:
        return _result("unchanged", existing, existing.corpus, True, scan, reader)
    if existing is not None and not replace:
        raise BenchmarkExists(
            f"benchmark {name!r} already exists with different content; "
            "pass --replace (or tick Replace) to swap it"
        )
    corpus = Corpus.objects.filter(content_hash=scan.corpus_hash).first()
    if existing is not None:
        old_corpus = existing.corpus
        _benchmark_delete(existing)
        if old_corpus != corpus:
            _corpus_delete_if_unused(old_corpus)
    reused = corpus is not None
    if corpus is None:
        corpus = _corpus_create(reader, scan, name, progress)
    benchmark = Benchmark.objects.create(
        name=name,
        corpus=corpus,
        source=origin,
        split=split,
        content_hash=scan.benchmark_hash,
        created_by=created_by,
    )
    _queries_write(reader, benchmark_id=benchmark.pk)
    _qrels_write(reader, benchmark_id=benchmark.pk, corpus_id=corpus.pk)
    if corpus.index_status != IndexStatus.READY:
        corpus_index_queue(corpus=corpus)
    status = "replaced" if existing is not None else "created"
    return _result(status, benchmark, corpus, reused, scan, reader)


def _result(
    status: str,
    benchmark: Benchmark,
    corpus: Corpus,
    reused: bool,
    scan: importers.ScanResult,
    reader: importers.Source,
) -> ImportResult:
    return ImportResult(
        status=status,
        benchmark_id=benchmark.pk,
        corpus_id=corpus.pk,
        corpus_name=corpus.name,
        corpus_reused=reused,
        documents=scan.documents,
        queries=scan.queries,
        qrels=scan.qrels,
        warnings=tuple(reader.warnings),
    )


def _corpus_create(
    reader: importers.Source, scan: importers.ScanResult, name: str, progress: Progress | None
) -> Corpus:
    taken = Corpus.objects.filter(name=name).exists()
    corpus = Corpus.objects.create(
        name=f"{name}-{scan.corpus_hash[:12]}" if taken else name,
        content_hash=scan.corpus_hash,
        doc_count=scan.documents,
    )
    written_hash = _documents_write(
        reader, corpus_id=corpus.pk, total=scan.documents, progress=progress
    )
    if written_hash != scan.corpus_hash:
        raise ImportRejected(f"{reader.corpus_path} changed while it was being imported")
    return corpus


def _benchmark_delete(benchmark: Benchmark) -> None:
    # Qrels first, in one statement, so the queries' cascade has nothing left to collect.
    Qrel.objects.filter(query__benchmark=benchmark).delete()
    try:
        benchmark.delete()
    except (ProtectedError, RestrictedError) as exc:
        users = sorted({type(obj)._meta.label for obj in exc.args[1]})
        raise ImportRejected(
            f"benchmark {benchmark.name!r} can't be replaced: {', '.join(users)} rows refer "
            "to it. Import the new version under another name."
        ) from None


def _corpus_delete_if_unused(corpus: Corpus) -> None:
    if corpus.benchmarks.exists():
        return
    Qrel.objects.filter(document__corpus=corpus).delete()
    citing = _models_citing_documents(corpus)
    if citing:
        raise ImportRejected(
            f"corpus {corpus.name!r} can't be replaced: {', '.join(citing)} rows refer to "
            "its documents. Import the new version under another name."
        )
    # A raw DELETE: the ORM's cascade would load every document (text included) first.
    Document.objects.filter(corpus=corpus)._raw_delete(connection.alias)
    corpus.delete()


def _models_citing_documents(corpus: Corpus) -> list[str]:
    """Names of the other models (e.g. curated items) with rows citing this corpus."""
    names = []
    for relation in Document._meta.related_objects:
        model = relation.related_model
        if isinstance(model, str):
            continue
        lookup = {f"{relation.field.name}__corpus": corpus}
        if model._default_manager.filter(**lookup).exists():
            names.append(model._meta.label)
    return names


def corpus_index_queue(*, corpus: Corpus) -> None:
    """Mark the corpus's index as queued and enqueue its build once the import commits."""
    Corpus.objects.filter(pk=corpus.pk).update(index_status=IndexStatus.QUEUED, index_error="")
    corpus.index_status = IndexStatus.QUEUED
    corpus_id = corpus.pk
    transaction.on_commit(lambda: _index_enqueue(corpus_id))


def _index_enqueue(corpus_id: int) -> None:
    try:
        queues.enqueue(queues.CORPUS_INDEX_BUILD, corpus_id)
    except KombuOperationalError as exc:
        # Not run inline: say so on the corpus; the index is built on first use instead.
        logger.warning("could not queue the index build of corpus %s: %s", corpus_id, exc)
        Corpus.objects.filter(pk=corpus_id).update(
            index_status=IndexStatus.MISSING, index_error=f"build not queued: {exc}"
        )


# --- the write pass: rows into the database, in batches ------------------------------------


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


def _documents_write(
    source: importers.Source, *, corpus_id: int, total: int, progress: Progress | None = None
) -> str:
    """Stream the documents into `corpus_id`; returns the content hash of what was written.

    Hashing again costs little and proves the file did not change since the check pass.
    """
    state = importers.ImportProgress(phase="writing", total_documents=total)
    writer = _RowWriter(Document, ("corpus_id", "external_id", "title", "text"))
    hasher = ContentHasher()
    for doc in source.documents():
        hasher.add(doc)
        writer.add((corpus_id, doc.doc_id, doc.title, doc.text))
        if progress and hasher.documents % importers.PROGRESS_EVERY == 0:
            state.documents = hasher.documents
            progress(state)
    writer.flush()
    state.documents = writer.written
    if progress:
        progress(state)
    return hasher.hexdigest()


def _queries_write(source: importers.Source, *, benchmark_id: int) -> int:
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


def _qrels_write(source: importers.Source, *, benchmark_id: int, corpus_id: int) -> int:
    writer = _RowWriter(Qrel, ("query_id", "document_id", "grade"))
    pending: list[importers.QrelRecord] = []
    for qrel in source.qrels():
        pending.append(qrel)
        if len(pending) >= BATCH_SIZE:
            _qrels_resolve(pending, writer, benchmark_id, corpus_id)
            pending = []
    _qrels_resolve(pending, writer, benchmark_id, corpus_id)
    writer.flush()
    return writer.written


def _qrels_resolve(
    pending: list[importers.QrelRecord], writer: _RowWriter, benchmark_id: int, corpus_id: int
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
            raise importers.qrel_error(qrel, f"unknown document {qrel.doc_id!r}", "corpus-id")
        writer.add((queries[qrel.query_id], documents[qrel.doc_id], qrel.grade))


# --- uploads ----------------------------------------------------------------------------


def import_job_create(
    *,
    upload: UploadedFile,
    name: str,
    split: str,
    replace: bool,
    created_by: User | None,
) -> ImportJob:
    """Save an uploaded zip (BEIR) or .json (HotpotQA) and queue its import."""
    suffix = Path(upload.name or "").suffix.lower()
    fmt = {".zip": BenchmarkSource.BEIR, ".json": BenchmarkSource.HOTPOTQA}.get(suffix)
    if fmt is None:
        raise ImportRejected("upload a .zip of a BEIR folder or a HotpotQA .json file")
    folder = settings.DATA_DIR / "uploads" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    target = folder / f"upload{suffix}"
    with open(target, "wb") as sink:
        for chunk in upload.chunks():
            sink.write(chunk)
    return _import_job_queue(
        name=_benchmark_name(name),
        fmt=fmt,
        split=split,
        replace=replace,
        upload_path=target,
        created_by=created_by,
    )


@transaction.atomic
def _import_job_queue(
    *,
    name: str,
    fmt: str,
    split: str,
    replace: bool,
    upload_path: Path,
    created_by: User | None,
) -> ImportJob:
    job = ImportJob.objects.create(
        name=name,
        fmt=fmt,
        split=split,
        replace=replace,
        upload_path=str(upload_path),
        created_by=created_by,
    )
    job_id = job.pk
    transaction.on_commit(lambda: queues.enqueue(queues.IMPORT_JOB_RUN, job_id))
    return job


def import_job_run(*, job_id: int) -> ImportJob | None:
    """Run a queued upload's import and record the outcome on its row.

    Safe to run twice (a redelivered task after a worker died): a finished job is left
    alone, and a half-done one starts over because its transaction was rolled back.
    """
    job = ImportJob.objects.filter(pk=job_id).first()
    if job is None or not job.is_active:
        return job
    ImportJob.objects.filter(pk=job_id).update(status=ImportStatus.RUNNING)
    upload = Path(job.upload_path)
    progress = ProgressFile(upload.parent / "progress.json")
    try:
        path, fmt = importers.upload_source_path(upload, upload.parent / "unpacked")
        result = benchmark_import(
            path=path,
            name=job.name,
            fmt=fmt,
            split=job.split,
            replace=job.replace,
            progress=progress,
            created_by=job.created_by,
        )
    except (ImportRejected, BeirFormatError) as exc:
        _import_job_finish(job, ImportStatus.FAILED, str(exc))
    except Exception as exc:
        logger.exception("import job %s failed", job_id)
        _import_job_finish(job, ImportStatus.FAILED, f"unexpected error: {exc!r}")
    else:
        status = ImportStatus.DONE if result.changed else ImportStatus.UNCHANGED
        _import_job_finish(job, status, result.describe(job.name), result)
    finally:
        shutil.rmtree(upload.parent, ignore_errors=True)
    job.refresh_from_db()
    return job


def _import_job_finish(
    job: ImportJob, status: str, message: str, result: ImportResult | None = None
) -> None:
    ImportJob.objects.filter(pk=job.pk).update(
        status=status,
        message=message,
        finished=timezone.now(),
        benchmark_id=result.benchmark_id if result else None,
        documents=result.documents if result else 0,
        queries=result.queries if result else 0,
        qrels=result.qrels if result else 0,
    )


class ProgressFile:
    """An import's live progress as a small JSON file beside the upload.

    Written at most twice a second, atomically (write, then rename), so the page that
    polls it never reads half a file.
    """

    def __init__(self, path: Path, *, interval: float = 0.5) -> None:
        self.path = path
        self.interval = interval
        self._last = 0.0

    def __call__(self, state: importers.ImportProgress) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        body = {
            "phase": state.phase,
            "documents": state.documents,
            "total_documents": state.total_documents,
            "rate": round(state.rate),
        }
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(body))
        os.replace(partial, self.path)


# --- exports ----------------------------------------------------------------------------


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
