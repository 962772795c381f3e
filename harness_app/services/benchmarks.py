"""Benchmark import: check the source, then write it all or nothing.

A replaced benchmark (and its corpus, once unused) is deleted in the same transaction, and
a new corpus's index build is queued for after the commit. The check pass is
harness_app.importers.scan; the rows are written by services.benchmark_rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import ProtectedError, RestrictedError
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import queues
from harness_app.importers.formats import source_open
from harness_app.importers.records import ImportRejected, Progress, Source
from harness_app.importers.scan import ScanResult, source_scan
from harness_app.models import Benchmark, Corpus, Document, IndexStatus, Qrel
from harness_app.services.benchmark_rows import documents_write, qrels_write, queries_write

logger = logging.getLogger(__name__)


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
    name = benchmark_name_clean(name)
    reader = source_open(Path(path), fmt=fmt, split=split)
    scan = source_scan(reader, split=split, progress=progress)
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


def benchmark_name_clean(name: str) -> str:
    """The name without surrounding blanks; an upload checks it before queueing its job."""
    name = name.strip()
    if not name or len(name) > 200:
        raise ImportRejected("a benchmark name needs 1 to 200 characters")
    return name


@transaction.atomic
def _benchmark_store(
    *,
    reader: Source,
    scan: ScanResult,
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
    queries_write(reader, benchmark_id=benchmark.pk)
    qrels_write(reader, benchmark_id=benchmark.pk, corpus_id=corpus.pk)
    if corpus.index_status != IndexStatus.READY:
        corpus_index_queue(corpus=corpus)
    status = "replaced" if existing is not None else "created"
    return _result(status, benchmark, corpus, reused, scan, reader)


def _result(
    status: str,
    benchmark: Benchmark,
    corpus: Corpus,
    reused: bool,
    scan: ScanResult,
    reader: Source,
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
    reader: Source, scan: ScanResult, name: str, progress: Progress | None
) -> Corpus:
    taken = Corpus.objects.filter(name=name).exists()
    corpus = Corpus.objects.create(
        name=f"{name}-{scan.corpus_hash[:12]}" if taken else name,
        content_hash=scan.corpus_hash,
        doc_count=scan.documents,
    )
    written_hash = documents_write(
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
