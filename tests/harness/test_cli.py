"""The command line on a tiny BEIR folder written to tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_app.harness.ablation import MECHANISMS
from harness_app.harness.cli import main
from tests.harness.test_baseline import CORPUS, QUESTION

ROOT = Path(__file__).resolve().parents[2]

SECOND = (
    "q-keeper",
    "What did a lighthouse keeper keep logbooks of?",
    {"Lighthouse_keeper": 2},
)


@pytest.fixture()
def beir(tmp_path: Path) -> Path:
    folder = tmp_path / "opera"
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as out:
        for doc in CORPUS:
            out.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.text}) + "\n")
    queries = [(QUESTION.query_id, QUESTION.text, QUESTION.qrels), SECOND]
    with open(folder / "queries.jsonl", "w") as out:
        for qid, text, _ in queries:
            out.write(json.dumps({"_id": qid, "text": text, "metadata": {"answer": ""}}) + "\n")
    rows = [f"{qid}\t{doc}\t{grade}" for qid, _, qrels in queries for doc, grade in qrels.items()]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows))
    return folder


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_eval_prints_one_aggregate_line_and_writes_rows(beir, tmp_path, capsys):
    rows_file = tmp_path / "rows.jsonl"
    index = str(tmp_path / "idx")
    code, out, _ = run_cli(capsys, "eval", str(beir), "--index-dir", index, "--out", str(rows_file))
    assert code == 0
    [line] = out.splitlines()
    summary = json.loads(line)
    assert summary["n"] == 2 and summary["condition"] == "full" and summary["policy"] == "baseline"
    assert summary["recall"] > summary["bm25_recall_same_k"]  # the opera question's bridge
    rows = [json.loads(r) for r in rows_file.read_text().splitlines()]
    assert [r["query_id"] for r in rows] == ["q-opera", "q-keeper"]
    assert rows[0]["final_answer_recall"] == 1.0
    assert rows[0]["reward"] == rows[0]["reward_components"]["total"]


def test_runs_of_the_deterministic_baseline_agree(beir, tmp_path, capsys):
    code, out, _ = run_cli(
        capsys, "eval", str(beir), "--index-dir", str(tmp_path / "i"), "--runs", "3"
    )
    summary = json.loads(out)
    assert code == 0 and summary["runs"] == 3
    assert summary["recall_std"] == summary["reward_std"] == summary["turns_std"] == 0.0


def test_all_ablations_prints_a_table_with_every_condition(beir, tmp_path, capsys):
    index = str(tmp_path / "idx")
    code, out, _ = run_cli(capsys, "eval", str(beir), "--index-dir", index, "--all-ablations")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:8] == [
        "condition", "n", "recall", "trajectory_recall", "final_answer_recall",
        "tool_diversity", "turns", "errors",
    ]  # fmt: skip
    conditions = [line.split()[0] for line in lines[1:-1]]
    assert conditions == ["full", *(f"-{m}" for m in MECHANISMS)]
    assert lines[-1].startswith("(9 conditions")


def test_all_ablations_as_json_lines(beir, tmp_path, capsys):
    argv = ["eval", str(beir), "--index-dir", str(tmp_path / "i"), "--all-ablations", "--json"]
    code, out, _ = run_cli(capsys, *argv)
    summaries = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(summaries) == 1 + len(MECHANISMS)
    off = {s["condition"]: s for s in summaries}
    assert off["-verification"]["tool_diversity"] < off["full"]["tool_diversity"]


def test_ablate_and_limit(beir, tmp_path, capsys):
    argv = ["eval", str(beir), "--index-dir", str(tmp_path / "i"), "--limit", "1"]
    code, out, _ = run_cli(capsys, *argv, "--ablate", "dedup", "compression")
    summary = json.loads(out)
    assert code == 0 and summary["n"] == 1 and summary["condition"] == "-compression-dedup"


def test_reward_preset_chooses_the_weights(beir, tmp_path, capsys):
    rows = {}
    for preset in ("default", "harness1"):
        out_file = tmp_path / f"{preset}.jsonl"
        argv = ["eval", str(beir), "--index-dir", str(tmp_path / "i"), "--out", str(out_file)]
        code, _, _ = run_cli(capsys, *argv, "--reward-preset", preset)
        assert code == 0
        rows[preset] = json.loads(out_file.read_text().splitlines()[0])
    # Same episode, same metrics; harness1 halves the diversity bonus (0.25 against 0.5).
    default, harness1 = rows["default"], rows["harness1"]
    assert default["curated_ids"] == harness1["curated_ids"]
    diversity = min(default["tool_diversity"] / 6, 1)
    assert default["reward_components"]["diversity"] == pytest.approx(0.5 * diversity)
    assert harness1["reward_components"]["diversity"] == pytest.approx(0.25 * diversity)
    argv = ["ablate", str(beir), "--index-dir", str(tmp_path / "i"), "--conditions", "full"]
    code, out, _ = run_cli(capsys, *argv, "--json", "--reward-preset", "harness1")
    assert code == 0 and json.loads(out)["reward_preset"] == "harness1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "{missing}"], "error: BEIR folder not found: {missing}"),
        (["eval", "{beir}", "--ablate", "telepathy"], "unknown mechanism(s) 'telepathy'"),
        (
            ["eval", "{beir}", "--policy", "oracle"],
            "unknown policy 'oracle' (known: baseline, baseline_sampled)",
        ),
        (["eval", "{beir}", "--split", "dev"], "has no qrels/dev.tsv"),
        (["eval", "{beir}", "--runs", "0"], "must be at least 1"),
        (
            ["eval", "{beir}", "--all-ablations", "--ablate", "dedup"],
            "cannot be combined",
        ),
        (["bench-retrieval", "{missing}"], "BEIR folder not found"),
        (["single-bm25", "{beir}", "--k", "0"], "--k must be at least 1"),
        (["eval", "{beir}", "--reward-preset", "paper"], "unknown reward preset 'paper'"),
        (["ablate", "{beir}", "--reward-preset", "paper"], "known: default, harness1"),
    ],
)
def test_bad_input_exits_2_with_one_line(beir, tmp_path, capsys, argv, message):
    fill = {"beir": str(beir), "missing": str(tmp_path / "nowhere")}
    argv = [a.format(**fill) for a in argv] + ["--index-dir", str(tmp_path / "i")]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert message.format(**fill) in err
    assert len(err.strip().splitlines()) == 1 and out == ""


def test_malformed_corpus_names_file_and_line(beir, tmp_path, capsys):
    with open(beir / "corpus.jsonl", "a") as out:
        out.write("{not json\n")
    code, _, err = run_cli(capsys, "eval", str(beir), "--index-dir", str(tmp_path / "i"))
    assert code == 2
    assert "corpus.jsonl, line 13" in err and "Traceback" not in err


def test_module_entry_point_reports_errors_without_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "harness_app.harness", "eval", str(tmp_path / "none")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: BEIR folder not found: {tmp_path / 'none'}"


def test_bench_retrieval_reports_ndcg_recall_and_speed(beir, capsys):
    code, out, _ = run_cli(capsys, "bench-retrieval", str(beir), "--json")
    result = json.loads(out)
    assert code == 0
    assert result["queries"] == 2
    assert 0 < result["ndcg@10"] <= 1 and result["queries_per_s"] > 0
    code, out, _ = run_cli(capsys, "bench-retrieval", str(beir))
    assert "nDCG@10" in out and "recall@100" in out and "queries/s" in out


def test_single_bm25_reports_recall_at_each_k(beir, tmp_path, capsys):
    argv = ["single-bm25", str(beir), "--k", "1", "30", "--json"]
    code, out, _ = run_cli(capsys, *argv, "--index-dir", str(tmp_path / "i"))
    result = json.loads(out)
    assert code == 0
    # The opera's answer doc is unreachable by plain BM25; the keeper's is found at once.
    assert result["final_answer_recall@30"] == 0.5
    assert result["recall@1"] <= result["recall@30"]
