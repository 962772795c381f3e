"""The real benchmarks in ../shared/data: counts match the files and export gives them back."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_app.models import Benchmark
from harness_app.services.benchmarks import benchmark_import
from harness_app.services.exports import benchmark_export
from tests.harness_app.test_import import normalised

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def _non_blank_lines(path: Path) -> int:
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


@pytest.mark.parametrize("fixture", ["hotpotqa_dir", "scifact_dir"])
def test_shared_benchmark_round_trips(
    request: pytest.FixtureRequest, tmp_path: Path, fixture: str
) -> None:
    folder: Path = request.getfixturevalue(fixture)

    result = benchmark_import(path=folder, name=fixture, fmt="beir")

    assert result.documents == _non_blank_lines(folder / "corpus.jsonl")
    assert result.queries == _non_blank_lines(folder / "queries.jsonl")
    assert result.qrels == _non_blank_lines(folder / "qrels" / "test.tsv") - 1  # the header
    benchmark = Benchmark.objects.with_counts().get(name=fixture)
    assert (benchmark.corpus.doc_count, benchmark.query_count, benchmark.qrel_count) == (
        result.documents,
        result.queries,
        result.qrels,
    )
    benchmark_export(benchmark=benchmark, directory=tmp_path / "out")
    assert normalised(tmp_path / "out") == normalised(folder)


def test_hotpotqa_dev500_matches_its_readme(hotpotqa_dir: Path) -> None:
    result = benchmark_import(path=hotpotqa_dir, name="hotpotqa-dev500", fmt="beir")

    assert (result.documents, result.queries, result.qrels) == (9_338, 500, 1_000)
    grades = (
        Benchmark.objects.get(name="hotpotqa-dev500")
        .queries.first()
        .qrels.values_list("grade", flat=True)
    )
    assert 2 in grades  # every question has an answer-bearing paragraph


def test_scifact_matches_its_readme(scifact_dir: Path) -> None:
    result = benchmark_import(path=scifact_dir, name="scifact", fmt="beir")

    assert (result.documents, result.queries, result.qrels) == (5_183, 1_109, 339)
