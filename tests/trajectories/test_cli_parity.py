"""A baseline batch run by the workers scores exactly what the harness CLI scores.

Both drive the same pure harness over the same corpus; the batch goes through the database
(import, index lifecycle, per-turn persistence), the CLI through files. Any difference would
mean the persisted path changed the episode.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness_app.models import Benchmark
from harness_app.services.benchmarks import benchmark_import
from tests.paths import ROOT
from trajectories.rollout import episode_run
from trajectories.selectors.batches import batch_summary
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db

QUERIES = 500  # the whole of hotpotqa-dev500
COMPARED = ("curated_recall", "final_answer_recall", "trajectory_recall", "tool_diversity", "turns")
CLI_NAMES = {"curated_recall": "recall"}


def test_baseline_batch_matches_the_cli_on_hotpotqa(
    hotpotqa_dir, baseline_policy, django_capture_on_commit_callbacks, tmp_path, monkeypatch
):
    # grep's 0.25 s deadline could stop a scan early on a busy machine, in one run and
    # not the other: both get all the time they need (the subprocess inherits it).
    monkeypatch.setenv("HARNESS_GREP_TIME_LIMIT_S", "60")
    result = benchmark_import(path=hotpotqa_dir, name="hotpotqa-dev500", fmt="beir")
    benchmark = Benchmark.objects.get(pk=result.benchmark_id)
    with django_capture_on_commit_callbacks():
        batch = batch_create(
            benchmark=benchmark, policy=baseline_policy, query_limit=QUERIES, max_turns=40
        )
    for episode_id in batch.episodes.order_by("pk").values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    summary = batch_summary(batch=batch)
    assert summary["episodes_completed"] == QUERIES

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_app.harness",
            "eval",
            str(hotpotqa_dir),
            "--limit",
            str(QUERIES),
            "--runs",
            "1",
            "--max-turns",
            "40",
            "--json",
            "--index-dir",
            str(tmp_path / "cli-index"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    figures = json.loads(cli.stdout.strip().splitlines()[-1])
    assert figures["n"] == QUERIES
    for name in COMPARED:
        assert summary["metrics"][name] == pytest.approx(
            figures[CLI_NAMES.get(name, name)], abs=1e-4
        ), name
