"""HotpotQA JSON: streamed, its context paragraphs unioned into a corpus, qrels graded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_app.importers import hotpotqa
from harness_app.importers.hotpotqa import HotpotQASource, JsonArrayReader, hotpotqa_doc_id
from harness_app.importers.records import BenchmarkFormatError
from harness_app.models import Benchmark, Qrel
from harness_app.services.benchmarks import benchmark_import
from tests.harness_app.conftest import HOTPOT, write_hotpot


def test_doc_ids_follow_the_shared_data_convention() -> None:
    assert hotpotqa_doc_id("Kiss and Tell (1945 film)") == "Kiss_and_Tell_1945_film"
    assert hotpotqa_doc_id("Pelé") == "Pel"
    assert hotpotqa_doc_id("Pryde & Sons") == "Pryde_Sons"


def test_corpus_is_the_union_of_context_paragraphs(hotpot_file: Path) -> None:
    docs = list(HotpotQASource(hotpot_file).documents())

    assert [d.doc_id for d in docs] == [
        "Ansel_Pryde",
        "Kettering_Vale",
        "Pryde_Sons",
        "Mira_Okonjo",
        "Dunmere",
        "Pryde_Sons_2",  # "Pryde, Sons" would collide with "Pryde & Sons"
    ]
    assert docs[0].title == "Ansel Pryde"
    assert (
        docs[0].text == "Ansel Pryde (1801–1870) was a clockmaker. He was born in Kettering Vale."
    )


@pytest.mark.django_db
def test_import_grades_answer_bearing_paragraphs_2_and_other_evidence_1(hotpot_file: Path) -> None:
    result = benchmark_import(path=hotpot_file, name="hotpot", fmt="hotpotqa")

    assert (result.documents, result.queries, result.qrels) == (6, 3, 5)
    benchmark = Benchmark.objects.get(name="hotpot")
    assert benchmark.source == "hotpotqa"
    grades = set(
        Qrel.objects.filter(query__benchmark=benchmark).values_list(
            "query__external_id", "document__external_id", "grade"
        )
    )
    assert grades == {
        ("h1", "Ansel_Pryde", 1),
        ("h1", "Kettering_Vale", 2),  # it contains "Lerrow River"
        ("h2", "Ansel_Pryde", 2),  # yes/no: every supporting paragraph
        ("h2", "Mira_Okonjo", 2),
        ("h3", "Dunmere", 2),
    }
    h1 = benchmark.queries.get(external_id="h1")
    assert h1.answer == "Lerrow River"
    assert h1.metadata == {"answer": "Lerrow River", "type": "bridge", "level": "easy"}


@pytest.mark.django_db
def test_supporting_paragraphs_outside_every_context_are_left_out_with_a_warning(
    hotpot_file: Path,
) -> None:
    result = benchmark_import(path=hotpot_file, name="hotpot", fmt="hotpotqa")

    # h3's "Hollin Moor" is in no question's context, as happens in the fullwiki setting
    assert result.warnings == (
        "1 supporting paragraph(s) are not in any question's context (fullwiki setting?); "
        "those judgements were left out",
    )
    assert "those judgements were left out" in result.describe("hotpot")


@pytest.mark.django_db
def test_compact_and_pretty_files_import_the_same_content(tmp_path: Path) -> None:
    pretty = benchmark_import(path=write_hotpot(tmp_path / "a.json"), name="a", fmt="hotpotqa")
    compact = write_hotpot(tmp_path / "b.json", indent=None)

    again = benchmark_import(path=compact, name="a", fmt="hotpotqa")

    assert again.status == "unchanged" and again.benchmark_id == pretty.benchmark_id


def test_the_reader_streams_across_chunk_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 7-byte chunks split records, strings and multi-byte characters mid-way.
    monkeypatch.setattr(hotpotqa, "READ_CHUNK", 7)
    path = write_hotpot(tmp_path / "h.json", indent=2)

    elements = list(JsonArrayReader(path))

    assert [value for _, _, value in elements] == HOTPOT
    assert [index for _, index, _ in elements] == [0, 1, 2]
    lines = path.read_text(encoding="utf-8").splitlines()
    for line, _, value in elements:  # each record is reported at the line it starts on
        assert lines[line - 1].strip() == "{" and json.dumps(value["_id"]) in lines[line]


def test_a_record_over_the_limit_is_reported_not_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hotpotqa, "READ_CHUNK", 100)
    path = tmp_path / "big.json"
    path.write_text('[{"_id": "h1", "question": "' + "x" * 5000 + '"}]')

    with pytest.raises(BenchmarkFormatError, match="or a record longer than 1000 bytes"):
        list(JsonArrayReader(path, max_record_bytes=1000))
