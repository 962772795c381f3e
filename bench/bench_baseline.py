"""The baseline policy: its margins over BM25 and what a turn costs it and the harness.

Prints figures, asserts nothing. Run from the project root:

    .venv/bin/python bench/bench_baseline.py [--limit 500] [--hotpot DIR]

For hotpotqa-dev500 (../shared/data, skipped with a message when absent) and for the
compositional fixture's held-out split (tests/fixtures/compositional, split `test`), it
plays one baseline episode per question and reports:

- the margins issue 17 asks for: curated recall minus BM25 recall at the same number of
  documents (`bm25_recall_same_k`), and trajectory recall minus BM25 recall at the same
  number of shown documents (`bm25_recall_same_shown`), computed as `eval` computes them;
- the policy's own time per turn (`act`), p50 and p95;
- the harness's time per step (`step`, retrieval and grep scans included), p50 and p95,
  and the same for steps without a grep_corpus call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness_app.harness.beir import beir_queries  # noqa: E402
from harness_app.harness.env import SearchHarness  # noqa: E402
from harness_app.harness.metrics import single_search_recall  # noqa: E402
from harness_app.harness.policies import make_policy  # noqa: E402
from harness_app.harness.retrieval import open_index  # noqa: E402
from harness_app.harness.runner import run_episode  # noqa: E402
from harness_app.harness.types import QuerySpec, Retriever  # noqa: E402

COMPOSITIONAL = ROOT / "tests" / "fixtures" / "compositional"


def report(name: str, retriever: Retriever, queries: list[QuerySpec]) -> None:
    env = SearchHarness(retriever)
    tools = [s["function"]["name"] for s in env.tool_schemas()]
    timings: dict[str, list[float]] = {"act": [], "step_grep": [], "step_other": []}
    margins_k, margins_shown = [], []
    for query in queries:
        result = run_episode(env, make_policy("baseline", tools=tools), query)
        metrics = result.metrics
        same_k = single_search_recall(retriever, query, metrics.curated_count).curated
        same_shown = single_search_recall(retriever, query, metrics.shown_count).curated
        margins_k.append(metrics.curated_recall - same_k)
        margins_shown.append(metrics.trajectory_recall - same_shown)
        for turn in result.turns[1:]:  # turn 0 is the reset
            timings["act"].append(turn.policy_seconds)
            grep = any(c["name"] == "grep_corpus" for c in turn.tool_calls)
            timings["step_grep" if grep else "step_other"].append(turn.env_seconds)
    print(f"{name} ({len(queries)} questions)")
    print(f"  curated recall - BM25 at the same k:         {statistics.fmean(margins_k):+.3f}")
    print(f"  trajectory recall - BM25 at the same shown:  {statistics.fmean(margins_shown):+.3f}")
    steps = timings["step_grep"] + timings["step_other"]
    for label, values in (
        ("policy act", timings["act"]),
        ("harness step, all", steps),
        ("harness step, no grep", timings["step_other"]),
        ("harness step, grep", timings["step_grep"]),
    ):
        if len(values) > 1:
            p50 = statistics.median(values) * 1000
            p95 = statistics.quantiles(values, n=20)[-1] * 1000
            print(f"  {label:<22} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  ({len(values)} turns)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--hotpot", default=str(ROOT.parent / "shared/data/hotpotqa-dev500"))
    args = parser.parse_args()
    cache = Path(tempfile.gettempdir()) / "harness-bench-indexes"
    report(
        "compositional, held-out split",
        open_index(COMPOSITIONAL, cache),
        beir_queries(COMPOSITIONAL, "test"),
    )
    hotpot = Path(args.hotpot)
    if not (hotpot / "corpus.jsonl").is_file():
        print(f"hotpotqa-dev500 skipped: {hotpot} not found")
        return
    report("hotpotqa-dev500", open_index(hotpot, cache), beir_queries(hotpot)[: args.limit])


if __name__ == "__main__":
    main()
