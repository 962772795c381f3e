"""MuSiQue, 2WikiMultihopQA, BrowseComp-Plus and FRAMES: what each import puts in the database.

The fixtures under tests/fixtures/<format>/ are small, made-up records in each format's
layout (not taken from the datasets).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from harness_app.importers.formats import format_detect
from harness_app.importers.frames import page_key
from harness_app.importers.paragraphs import answer_in_text, join_sentences, paragraph_doc_id
from harness_app.models import Benchmark, Query
from harness_app.services.benchmarks import benchmark_import
from harness_app.services.exports import benchmark_export
from tests.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
MUSIQUE = FIXTURES / "musique" / "musique_full.jsonl"
TWOWIKI = FIXTURES / "2wikimultihopqa" / "dev.json"
BROWSECOMP = FIXTURES / "browsecomp-plus"
FRAMES = FIXTURES / "frames"


def judgements(name: str) -> set[tuple[str, str, int]]:
    benchmark = Benchmark.objects.get(name=name)
    return {
        (q.external_id, qrel.document.title, qrel.grade)
        for q in benchmark.queries.prefetch_related("qrels__document")
        for qrel in q.qrels.all()
    }


def test_formats_are_detected_from_layout_and_first_record(tmp_path: Path) -> None:
    jsonl = tmp_path / "two.jsonl"
    jsonl.write_text(
        "".join(json.dumps(r) + "\n" for r in json.loads(TWOWIKI.read_text())),
        encoding="utf-8",
    )

    assert format_detect(MUSIQUE) == "musique"
    assert format_detect(TWOWIKI) == "2wikimultihopqa"
    assert format_detect(jsonl) == "2wikimultihopqa"
    assert format_detect(BROWSECOMP) == "browsecomp-plus"
    assert format_detect(FRAMES) == "frames"
    assert format_detect(ROOT / "harness_app" / "demo_data") == "beir"


def test_paragraph_ids_are_stable_and_separate_same_titled_texts() -> None:
    one = paragraph_doc_id("Orla Venn", "Born in Hethercombe.")

    assert one == paragraph_doc_id("Orla Venn", "Born in Hethercombe.")
    assert one.startswith("Orla_Venn-") and len(one) == len("Orla_Venn-") + 12
    assert paragraph_doc_id("Orla Venn", "Another text.") != one


def test_answers_match_whole_words_only() -> None:
    assert answer_in_text(["Sallow River"], "The sallow river flows.")
    assert not answer_in_text(["no"], "It is not known.")  # "no" is not inside "not"
    assert not answer_in_text(["", "  "], "anything")
    assert join_sentences(["One.", "Two.", " Three."]) == "One. Two. Three."


def test_wikipedia_links_and_titles_meet_on_one_key() -> None:
    assert page_key("https://en.wikipedia.org/wiki/ada_Lovelace#Life") == "Ada_Lovelace"
    assert page_key("https://en.m.wikipedia.org/wiki/Ada%20Lovelace") == "Ada_Lovelace"
    assert page_key("Ada  Lovelace") == "Ada_Lovelace"
    assert page_key("HTTPS://Example.org/a?b=1#c") == "https://example.org/a?b=1"


@pytest.mark.django_db
def test_musique_import_dedupes_paragraphs_and_grades_the_answer_hop() -> None:
    result = benchmark_import(path=MUSIQUE, name="musique", fmt="musique")

    # 8 paragraphs in the two answerable questions; Hethercombe and Bramwick repeat as is
    assert (result.documents, result.queries, result.qrels) == (6, 2, 5)
    assert result.warnings == ("1 unanswerable question(s) (answerable: false) were skipped",)
    assert judgements("musique") == {
        ("2hop__1_2", "Orla Venn", 1),
        ("2hop__1_2", "Hethercombe", 2),  # holds "Sallow River", and is the last hop
        ("3hop__3_4_5", "Orla Venn", 1),  # a second Orla Venn text: a document of its own
        ("3hop__3_4_5", "Tobias Marl", 2),  # "1761" occurs in it
        ("3hop__3_4_5", "Bramwick Bridge", 2),  # the last hop's paragraph
    }
    query = Query.objects.get(external_id="2hop__1_2")
    assert query.answer == "Sallow River"
    assert query.metadata["answer_aliases"] == ["the Sallow", "River Sallow"]
    assert query.metadata["question_decomposition"][1]["paragraph_support_idx"] == 1
    assert not Query.objects.filter(external_id="2hop__9_9").exists()
    assert Benchmark.objects.get(name="musique").source == "musique"


@pytest.mark.django_db
def test_twowiki_import_from_json_and_from_jsonl_is_the_same_benchmark(tmp_path: Path) -> None:
    first = benchmark_import(path=TWOWIKI, name="2wiki", fmt="2wikimultihopqa")
    jsonl = tmp_path / "dev.jsonl"
    records = json.loads(TWOWIKI.read_text(encoding="utf-8"))
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    again = benchmark_import(path=jsonl, name="2wiki", fmt="2wikimultihopqa")

    assert (first.documents, first.queries, first.qrels) == (3, 3, 6)
    assert again.status == "unchanged"
    assert judgements("2wiki") == {
        ("a1b2", "Lantern Road", 1),
        ("a1b2", "Mabel Cray", 2),  # "Edwin Cray" occurs in it
        ("c3d4", "Lantern Road", 2),
        ("c3d4", "Harrow Lane", 1),
        ("e5f6", "Lantern Road", 2),  # yes/no: every supporting paragraph
        ("e5f6", "Harrow Lane", 2),
    }
    query = Query.objects.get(external_id="a1b2")
    assert query.answer == "Edwin Cray" and query.metadata["type"] == "compositional"
    assert query.metadata["evidences"][1] == ["Mabel Cray", "father", "Edwin Cray"]
    doc = Benchmark.objects.get(name="2wiki").corpus.documents.get(title="Lantern Road")
    assert doc.text == "Lantern Road is a 1934 drama film. It was directed by Mabel Cray."


@pytest.mark.django_db
def test_browsecomp_plus_grades_gold_2_and_evidence_1_from_lists_and_qrel_files() -> None:
    result = benchmark_import(path=BROWSECOMP, name="bcp", fmt="browsecomp-plus")

    assert (result.documents, result.queries, result.qrels) == (5, 2, 4)
    benchmark = Benchmark.objects.get(name="bcp")
    grades = set(
        benchmark.queries.values_list("external_id", "qrels__document__external_id", "qrels__grade")
    )
    assert grades == {
        ("1", "101", 2),  # gold and evidence: gold wins
        ("1", "102", 1),
        ("2", "104", 2),  # from topics-qrels/qrel_golds.txt
        ("2", "103", 1),  # from topics-qrels/qrel_evidence.txt
    }
    assert benchmark.queries.get(external_id="2").answer == "Paul Anning"
    docs = benchmark.corpus.documents
    assert docs.get(external_id="101").title == "Marsh Lantern Society"
    assert docs.get(external_id="102").title == ""  # no title in the file; url is not kept


@pytest.mark.django_db
def test_frames_links_pages_by_title_and_grades_answer_pages_2() -> None:
    result = benchmark_import(path=FRAMES, name="frames", fmt="frames")

    # Kestle Moor is linked by no question, and stays in the corpus as a distractor
    assert (result.documents, result.queries, result.qrels) == (4, 2, 4)
    assert judgements("frames") == {
        ("0", "Orla Venn", 1),
        ("0", "Hethercombe", 2),  # "Sallow River" occurs in it; linked with a #fragment
        ("1", "Orla Venn", 1),
        ("1", "Bramwick Bridge", 1),  # linked as en.m.wikipedia.org/wiki/Bramwick%20Bridge
    }
    query = Query.objects.get(external_id="0")
    assert query.answer == "Sallow River"
    assert query.metadata["reasoning_types"] == "Multiple constraints"
    assert query.metadata["wiki_links"][1] == "https://en.wikipedia.org/wiki/Hethercombe#Geography"


@pytest.mark.django_db
def test_frames_questions_may_be_jsonl_with_link_columns_or_lists(tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    shutil.copy(FRAMES / "pages.jsonl", folder)
    rows = [
        {"id": "f1", "Prompt": "Where was Orla Venn born?", "Answer": "Hethercombe",
         "wiki_links": ["https://en.wikipedia.org/wiki/Orla_Venn"]},
        {"id": "f2", "Prompt": "What crosses the Sallow?", "Answer": "Bramwick Bridge",
         "wikipedia_link_1": "Bramwick Bridge", "wikipedia_link_2": ""},
    ]  # fmt: skip
    (folder / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    result = benchmark_import(path=folder, name="fj", fmt="frames")

    assert (result.queries, result.qrels) == (2, 2)
    assert judgements("fj") == {("f1", "Orla Venn", 2), ("f2", "Bramwick Bridge", 2)}


@pytest.mark.django_db
def test_the_command_detects_each_format() -> None:
    for path, name in ((MUSIQUE, "m"), (TWOWIKI, "w"), (BROWSECOMP, "b"), (FRAMES, "f")):
        out = io.StringIO()
        call_command("import_benchmark", str(path), "--name", name, "--no-progress", stdout=out)
        assert f"Imported benchmark {name!r}" in out.getvalue()
    sources = dict(Benchmark.objects.values_list("name", "source"))
    assert sources == {
        "m": "musique",
        "w": "2wikimultihopqa",
        "b": "browsecomp-plus",
        "f": "frames",
    }


@pytest.mark.django_db
def test_the_command_asks_for_a_format_it_cannot_tell(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n')

    with pytest.raises(CommandError) as raised:
        call_command("import_benchmark", str(path), "--name", "x", "--no-progress")

    assert str(raised.value) == (
        "mine.jsonl: can't tell the benchmark format from its first record; choose one of "
        "beir, hotpotqa, musique, 2wikimultihopqa, browsecomp-plus, frames\nNothing was written."
    )
    assert not Benchmark.objects.exists()


@pytest.mark.django_db
def test_an_exported_musique_benchmark_keeps_answers_and_aliases(tmp_path: Path) -> None:
    benchmark_import(path=MUSIQUE, name="musique", fmt="musique")
    benchmark_export(benchmark=Benchmark.objects.get(name="musique"), directory=tmp_path / "out")

    again = benchmark_import(path=tmp_path / "out", name="as-beir", fmt="beir")

    assert (again.documents, again.queries, again.qrels) == (6, 2, 5)
    assert again.corpus_reused  # the same documents in the same order: one corpus
    query = Query.objects.get(benchmark__name="as-beir", external_id="2hop__1_2")
    assert query.answer == "Sallow River"
    assert query.metadata["answer_aliases"] == ["the Sallow", "River Sallow"]
    assert judgements("as-beir") == judgements("musique")
