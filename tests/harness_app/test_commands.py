"""import_benchmark, export_benchmark and setup_demo as a researcher runs them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from harness_app.models import Benchmark, IndexStatus
from tests.harness_app.conftest import QRELS, row_counts, write_beir
from tests.harness_app.test_import import normalised

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_reports_counts_and_shows_progress(beir_folder: Path, monkeypatch) -> None:
    bars = io.StringIO()
    monkeypatch.setattr("sys.stderr", bars)

    out, _ = run("import_benchmark", str(beir_folder), "--name", "orchard")

    assert (
        "Imported benchmark 'orchard': 6 documents, 3 queries, 5 qrels (new corpus 'orchard')."
        in out
    )
    progress = bars.getvalue()
    assert "checking" in progress and "writing" in progress
    assert "[##############################] 100% 6/6 docs" in progress and "docs/s" in progress


def test_import_again_says_nothing_changed(beir_folder: Path) -> None:
    run("import_benchmark", str(beir_folder), "--name", "orchard", "--no-progress")

    out, _ = run("import_benchmark", str(beir_folder), "--name", "orchard", "--no-progress")

    assert "Benchmark 'orchard' is unchanged (same content hash): nothing was written." in out


def test_bad_input_fails_with_the_place_and_writes_nothing(
    beir_folder: Path, tmp_path: Path
) -> None:
    broken = write_beir(tmp_path / "broken", qrels=[*QRELS, ("q7", "alder", 1)])
    before = row_counts()

    with pytest.raises(CommandError) as raised:
        run("import_benchmark", str(broken), "--name", "broken", "--no-progress")

    message = str(raised.value)
    assert "qrels/test.tsv, line 7, field 'query-id': unknown query 'q7'" in message
    assert message.endswith("Nothing was written.")
    assert row_counts() == before


def test_replace_needs_the_flag(beir_folder: Path, tmp_path: Path) -> None:
    run("import_benchmark", str(beir_folder), "--name", "orchard", "--no-progress")
    edited = write_beir(tmp_path / "edited", qrels=QRELS[:1])

    with pytest.raises(CommandError, match="already exists with different content; pass --replace"):
        run("import_benchmark", str(edited), "--name", "orchard", "--no-progress")
    out, _ = run("import_benchmark", str(edited), "--name", "orchard", "--replace", "--no-progress")

    assert out.startswith("Replaced benchmark 'orchard'")
    assert Benchmark.objects.with_counts().get(name="orchard").qrel_count == 1


def test_a_json_file_is_read_as_hotpotqa(hotpot_file: Path) -> None:
    out, _ = run("import_benchmark", str(hotpot_file), "--name", "hotpot", "--no-progress")

    assert "Imported benchmark 'hotpot': 6 documents, 3 queries, 5 qrels" in out
    assert "1 supporting paragraph(s) are not in any question's context" in out


def test_export_writes_the_beir_folder(beir_folder: Path, tmp_path: Path) -> None:
    run("import_benchmark", str(beir_folder), "--name", "orchard", "--no-progress")

    out, _ = run("export_benchmark", "orchard", str(tmp_path / "out"))

    assert out.startswith("Wrote 6 documents, 3 queries and 5 qrels to")
    assert normalised(tmp_path / "out") == normalised(beir_folder)


def test_export_of_an_unknown_benchmark_fails(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no benchmark named 'nope'"):
        run("export_benchmark", "nope", str(tmp_path))


def test_setup_demo_imports_and_indexes_the_demo_once(data_dir: Path) -> None:
    first, _ = run("setup_demo")
    second, _ = run("setup_demo")

    assert "login researcher / harness-demo" in first
    assert "Imported benchmark 'demo': 54 documents, 12 queries, 25 qrels" in first
    assert "index of corpus 'demo' built:" in first
    assert "Benchmark 'demo' is unchanged (same content hash): nothing was written." in second
    assert "index of corpus 'demo' already built:" in second
    demo = Benchmark.objects.select_related("corpus").get(name="demo")
    assert demo.source == "demo" and demo.corpus.index_status == IndexStatus.READY
