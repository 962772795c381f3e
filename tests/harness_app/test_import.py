"""Importing BEIR folders: what lands in the database, re-imports, replacement, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_app.models import Benchmark, Corpus, Document, IndexStatus, Qrel, Query
from harness_app.services.benchmarks import BenchmarkExists, benchmark_import
from harness_app.services.exports import benchmark_export
from tests import factories
from tests.harness_app.conftest import CORPUS, QRELS, QUERIES, row_counts, write_beir

pytestmark = pytest.mark.django_db


def normalised(folder: Path, split: str = "test") -> dict[str, list[str]]:
    """Each file's lines with JSON keys sorted: the form a round trip must preserve."""

    def jsonl(path: Path) -> list[str]:
        lines = path.read_text(encoding="utf-8").splitlines()
        return [
            json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False)
            for line in lines
            if line.strip()
        ]

    return {
        "corpus": jsonl(folder / "corpus.jsonl"),
        "queries": jsonl(folder / "queries.jsonl"),
        "qrels": (folder / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines(),
    }


def test_import_stores_every_record_in_file_order(beir_folder: Path) -> None:
    result = benchmark_import(path=beir_folder, name="orchard", fmt="beir")

    assert (result.status, result.documents, result.queries, result.qrels) == ("created", 6, 3, 5)
    benchmark = Benchmark.objects.with_counts().get(name="orchard")
    assert (benchmark.query_count, benchmark.qrel_count) == (3, 5)
    corpus = benchmark.corpus
    assert corpus.doc_count == 6 and corpus.index_status == IndexStatus.QUEUED
    assert list(corpus.documents.values_list("external_id", flat=True)) == [
        d["_id"] for d in CORPUS
    ]
    assert corpus.documents.get(external_id="quince").text.endswith("ünïcödé.")
    q3 = benchmark.queries.get(external_id="q3")
    assert q3.answer == "pears | pear" and q3.metadata == {"answer": ["pears", "pear"]}
    grades = Qrel.objects.filter(query__benchmark=benchmark).values_list(
        "query__external_id", "document__external_id", "grade"
    )
    assert list(grades) == QRELS


def test_export_gives_the_folder_back(beir_folder: Path, tmp_path: Path) -> None:
    benchmark_import(path=beir_folder, name="orchard", fmt="beir")
    counts = benchmark_export(
        benchmark=Benchmark.objects.get(name="orchard"), directory=tmp_path / "out"
    )

    assert (counts.documents, counts.queries, counts.qrels) == (6, 3, 5)
    assert normalised(tmp_path / "out") == normalised(beir_folder)


def test_reimporting_identical_content_writes_nothing(beir_folder: Path, tmp_path: Path) -> None:
    first = benchmark_import(path=beir_folder, name="orchard", fmt="beir")
    before = row_counts()
    copy = write_beir(tmp_path / "copy")  # same content, other files

    again = benchmark_import(path=copy, name="orchard", fmt="beir")

    assert again.status == "unchanged" and not again.changed
    assert again.benchmark_id == first.benchmark_id
    assert "unchanged" in again.describe("orchard") and "nothing was written" in again.describe(
        "orchard"
    )
    assert row_counts() == before


def test_changed_content_under_an_existing_name_needs_replace(
    beir_folder: Path, tmp_path: Path
) -> None:
    benchmark_import(path=beir_folder, name="orchard", fmt="beir")
    before = row_counts()
    edited = write_beir(tmp_path / "edited", qrels=QRELS[:-1])

    with pytest.raises(
        BenchmarkExists, match="'orchard' already exists with different content; pass --replace"
    ):
        benchmark_import(path=edited, name="orchard", fmt="beir")

    assert row_counts() == before


def test_replace_swaps_the_benchmark_and_drops_its_unused_corpus(
    beir_folder: Path, tmp_path: Path
) -> None:
    old = benchmark_import(path=beir_folder, name="orchard", fmt="beir")
    new_corpus = [*CORPUS, {"_id": "extra", "title": "Extra", "text": "One more document."}]
    edited = write_beir(tmp_path / "edited", corpus=new_corpus, qrels=QRELS[:2])

    new = benchmark_import(path=edited, name="orchard", fmt="beir", replace=True)

    assert new.status == "replaced" and not new.corpus_reused
    assert not Corpus.objects.filter(pk=old.corpus_id).exists()
    assert (
        Document.objects.count() == 7 and Qrel.objects.count() == 2 and Query.objects.count() == 3
    )
    assert Benchmark.objects.get(name="orchard").corpus.name == "orchard"


def test_replace_keeping_the_documents_reuses_the_corpus(beir_folder: Path, tmp_path: Path) -> None:
    old = benchmark_import(path=beir_folder, name="orchard", fmt="beir")
    edited = write_beir(tmp_path / "edited", qrels=QRELS[:3])

    new = benchmark_import(path=edited, name="orchard", fmt="beir", replace=True)

    assert new.corpus_reused and new.corpus_id == old.corpus_id
    assert Document.objects.count() == 6 and Qrel.objects.count() == 3


def test_two_benchmarks_over_the_same_documents_share_one_corpus(
    beir_folder: Path, tmp_path: Path
) -> None:
    write_beir(beir_folder, qrels=QRELS[:2], split="dev")
    test = benchmark_import(path=beir_folder, name="orchard-test", fmt="beir")
    dev = benchmark_import(path=beir_folder, name="orchard-dev", fmt="beir", split="dev")

    assert dev.corpus_reused and dev.corpus_id == test.corpus_id
    assert Corpus.objects.count() == 1 and Document.objects.count() == 6
    assert Benchmark.objects.get(name="orchard-dev").split == "dev"


def test_queries_without_judgements_in_the_split_are_kept(tmp_path: Path) -> None:
    queries = [*QUERIES, {"_id": "train-only", "text": "Not judged in test."}]
    folder = write_beir(tmp_path / "b", queries=queries)

    result = benchmark_import(path=folder, name="b", fmt="beir")

    assert result.queries == 4  # the whole queries.jsonl, so an export gives it back
    assert Query.objects.get(external_id="train-only").metadata == {}


def test_a_failure_while_writing_rolls_everything_back(
    existing, beir_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = row_counts()

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("harness_app.services.benchmarks.qrels_write", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        benchmark_import(path=beir_folder, name="existing", fmt="beir", replace=True)

    assert row_counts() == before
    assert Benchmark.objects.get(name="existing").pk == existing.pk


def test_import_queues_the_index_build_after_commit(
    beir_folder: Path, django_capture_on_commit_callbacks, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued: list[tuple] = []
    monkeypatch.setattr(
        "harness_app.tasks.corpus_index_build.apply_async",
        lambda args, queue: queued.append((args, queue)),
    )

    with django_capture_on_commit_callbacks(execute=True):
        result = benchmark_import(path=beir_folder, name="orchard", fmt="beir")

    assert queued == [((result.corpus_id,), "index")]
    assert Corpus.objects.get(pk=result.corpus_id).index_status == IndexStatus.QUEUED


def test_an_unreachable_broker_is_reported_on_the_corpus(
    beir_folder: Path, django_capture_on_commit_callbacks, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu.exceptions import OperationalError

    def refuse(args, queue) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr("harness_app.tasks.corpus_index_build.apply_async", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        result = benchmark_import(path=beir_folder, name="orchard", fmt="beir")

    corpus = Corpus.objects.get(pk=result.corpus_id)
    assert corpus.index_status == IndexStatus.MISSING
    assert "not queued: connection refused" in corpus.index_error


def test_the_baseline_policy_config_exists_after_migrating() -> None:
    from importlib import import_module

    from django.apps import apps

    from harness_app.models import PolicyConfig

    # The data migration's step, run again (it keeps a row that is there): the suite runs in
    # any order, and a transactional test before this one may have emptied every table.
    import_module("harness_app.migrations.0003_baseline_policy").create_baseline(apps, None)

    baseline = PolicyConfig.objects.get(name="baseline")
    assert baseline.kind == "baseline" and baseline.get_kind_display() == "Rule baseline (no model)"


def test_a_benchmark_with_rollouts_is_not_replaced(existing, tmp_path: Path) -> None:
    from django.apps import apps

    from harness_app.importers.records import ImportRejected

    batch_model = apps.get_model("trajectories", "RolloutBatch")
    batch_model.objects.create(benchmark=existing, policy=factories.baseline_policy())
    before = row_counts()

    with pytest.raises(ImportRejected, match=r"trajectories\.RolloutBatch rows refer to it"):
        benchmark_import(
            path=write_beir(tmp_path / "new"), name="existing", fmt="beir", replace=True
        )

    assert row_counts() == before
