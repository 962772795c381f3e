"""Command line for evaluating policies on BEIR folders without Django or any server.

    python -m harness_app.harness eval BEIR_DIR [--policy baseline] [--limit N]
        [--ablate MECHANISM ...] [--all-ablations] [--max-turns 40] [--runs 1]
        [--out FILE] [--json] [--split test] [--index-dir DIR] [--reward-preset default]
        [--reader URL [--reader-model NAME] [--reader-docs curated|gold] [--reader-judge]]
    python -m harness_app.harness ablate BEIR_DIR [--policy baseline] [--runs 1] [--limit N]
        [--conditions full,minus_verification,...] [--csv FILE] [--json] [--max-turns 40]
        [--reward-preset default]
    python -m harness_app.harness bench-retrieval BEIR_DIR [--json] [--split test]
        [--retriever bm25|dense|hybrid]
    python -m harness_app.harness single-bm25 BEIR_DIR [--k 5 10 30] [--limit N] [--json]

`eval` writes one JSON row per query and run to --out (JSONL) and prints the aggregate as
one JSON line; with --all-ablations it prints a table (or, with --json, one JSON line per
condition) for the full harness and each single mechanism switched off. Every aggregate
carries plain single-query BM25 recall at the same number of documents, the bar a search
agent has to clear: cut at each episode's curated-set size (`bm25_*_same_k`, to compare
with curated and final-answer recall) and at the number of documents it was shown
(`bm25_*_same_shown`, to compare with trajectory recall). With --reader a reader model
answers each question from the curated set, and the aggregate carries `answer_em` and
`answer_f1` (answer_eval.py).

`ablate` runs Harness-1's named ablation conditions (`ablation.REFERENCE_CONDITIONS`) x N
runs in this one process and reports each of the reference's metrics as mean and std
across runs: a table, or with --json one object with a `conditions` list; --csv writes the
reference's CSV columns with the means. The work is `ablation_matrix.matrix_run`, which the
web app's ablation matrices call too; that of `eval` is in condition_eval.py.

Every command takes `--retriever bm25|dense|hybrid` (default bm25): the search tools of
`eval` and `ablate` then use it, and `bench-retrieval` scores it (nDCG@10, recall@10/30/100).
Dense and hybrid need the `dense` extra; their embeddings are built beside the cached BM25
index on first use (retrieval/hybrid.py).

`--reward-preset` picks the reward weights by name (`reward.REWARD_PRESETS`: default,
harness1, library_default); `harness1` is the paper's reward for 40-turn episodes.

Bad input (a missing folder or file, an unknown mechanism, condition or policy, a malformed BEIR
line) prints one "error: ..." line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from harness_app.harness.ablation import (
    MECHANISMS,
    REFERENCE_CONDITIONS,
    Ablation,
    reference_conditions,
)
from harness_app.harness.ablation_matrix import (
    format_matrix,
    matrix_csv,
    matrix_report,
    matrix_run,
)
from harness_app.harness.answer_eval import (
    add_reader_arguments,
    answer_step_from_args,
)
from harness_app.harness.beir import BeirFormatError, beir_paths, beir_queries
from harness_app.harness.condition_eval import (
    aggregate_rows,
    combine_runs,
    format_table,
    run_condition,
)
from harness_app.harness.config import HarnessConfig
from harness_app.harness.metrics import single_search_recall
from harness_app.harness.policies import POLICY_FACTORIES
from harness_app.harness.reward import REWARD_PRESETS, RewardConfigError, RewardWeights
from harness_app.harness.types import JSONObject, QuerySpec, Retriever

EXIT_USAGE = 2


class CliError(Exception):
    """Bad input; main() prints the message on one line and exits with status 2."""


# -- shared setup ------------------------------------------------------------------------


def default_index_dir() -> Path:
    """$XDG_CACHE_HOME/harness-workbench/indexes, or the temp dir when there is no home."""
    base = os.environ.get("XDG_CACHE_HOME") or (
        str(Path.home() / ".cache") if Path.home().is_dir() else tempfile.gettempdir()
    )
    return Path(base) / "harness-workbench" / "indexes"


def _check_folder(folder: str, split: str) -> Path:
    path = Path(folder)
    if not path.is_dir():
        raise CliError(f"BEIR folder not found: {folder}")
    try:
        beir_paths(path, split)
    except FileNotFoundError as exc:
        raise CliError(str(exc)) from None
    return path


def _open_retriever(folder: Path, index_dir: str | None, kind: str = "bm25") -> Retriever:
    # Imported here so that `--help` and input errors never pay for numpy and the index.
    from harness_app.harness.retrieval import BM25IndexError, open_index
    from harness_app.harness.retrieval.dense import DenseIndexError
    from harness_app.harness.retrieval.encoder import EncoderUnavailableError
    from harness_app.harness.retrieval.hybrid import dense_build, retriever_open

    try:
        bm25 = open_index(folder, Path(index_dir) if index_dir else default_index_dir())
    except (BM25IndexError, OSError) as exc:
        raise CliError(f"cannot open or build the BM25 index: {exc}") from None
    try:
        return retriever_open(kind, bm25, build=dense_build)
    except (DenseIndexError, EncoderUnavailableError, ValueError) as exc:
        raise CliError(f"cannot open the {kind} retriever: {exc}") from None


def _load_queries(folder: Path, split: str, limit: int | None) -> list[QuerySpec]:
    queries = beir_queries(folder, split)
    if not queries:
        raise CliError(f"{folder} has no judged queries in split {split!r}")
    return queries[:limit] if limit else queries


# -- eval --------------------------------------------------------------------------------


def conditions_from_args(args: argparse.Namespace) -> list[Ablation]:
    """The ablations to run: the full harness and each mechanism off, or one chosen set."""
    if args.all_ablations and args.ablate:
        raise CliError("--ablate and --all-ablations cannot be combined")
    if args.all_ablations:
        return [Ablation(), *(Ablation().without(m) for m in MECHANISMS)]
    try:
        return [Ablation().without(*args.ablate)]
    except ValueError as exc:
        raise CliError(str(exc)) from None


@contextmanager
def _rows_file(path: str | None) -> Iterator[TextIO | None]:
    if path is None:
        yield None
        return
    try:
        handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
    with handle:
        yield handle


def _check_policy(name: str) -> None:
    if name not in POLICY_FACTORIES:
        known = ", ".join(sorted(POLICY_FACTORIES))
        raise CliError(f"unknown policy {name!r} (known: {known})")


def _reward_weights(args: argparse.Namespace) -> RewardWeights:
    try:
        return RewardWeights.preset(args.reward_preset)
    except RewardConfigError as exc:
        raise CliError(f"--reward-preset: {exc}") from None


def cmd_eval(args: argparse.Namespace) -> int:
    _check_policy(args.policy)
    if args.runs < 1 or args.max_turns < 1 or (args.limit is not None and args.limit < 1):
        raise CliError("--runs, --max-turns and --limit must be at least 1")
    conditions = conditions_from_args(args)
    weights = _reward_weights(args)
    folder = _check_folder(args.beir_dir, args.split)
    queries = _load_queries(folder, args.split, args.limit)
    try:
        answer_step = answer_step_from_args(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    retriever = _open_retriever(folder, args.index_dir, args.retriever)
    config = HarnessConfig(max_turns=args.max_turns)
    started = time.perf_counter()
    summaries = []
    with _rows_file(args.out) as out:
        for ablation in conditions:
            runs = run_condition(
                retriever,
                queries,
                policy_name=args.policy,
                ablation=ablation,
                config=config,
                runs=args.runs,
                out=out,
                weights=weights,
                answer_step=answer_step,
            )
            per_run = [aggregate_rows(rows) for rows in runs]
            summaries.append(combine_runs(ablation.label, args.policy, len(queries), per_run))
    if answer_step is not None:
        answer_step.reader.close()
    _print_summaries(summaries, args, time.perf_counter() - started)
    return 0


def _print_summaries(summaries: list[JSONObject], args: argparse.Namespace, took: float) -> None:
    if args.all_ablations and not args.json:
        print(format_table(summaries))
        print(f"({len(summaries)} conditions x {args.runs} run(s), {took:.1f}s)")
        return
    for summary in summaries:
        print(json.dumps({**summary, "wall_seconds": round(took, 2)}))


# -- ablate: the reference's condition matrix (the work is in ablation_matrix.py) ----------


def write_matrix_csv(path: str, entries: Sequence[JSONObject]) -> None:
    """The reference's CSV (`ablation_matrix.matrix_csv`) written to `path`."""
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(matrix_csv(entries))
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None


def conditions_from_names(text: str | None) -> list[tuple[str, Ablation]]:
    """--conditions "a,b": the named reference conditions, or all of them when not given."""
    if text is None:
        return list(REFERENCE_CONDITIONS.items())
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise CliError(
            f"--conditions names no condition (known: {', '.join(REFERENCE_CONDITIONS)})"
        )
    try:
        return reference_conditions(names)
    except ValueError as exc:
        raise CliError(f"--conditions: {exc}") from None


def cmd_ablate(args: argparse.Namespace) -> int:
    _check_policy(args.policy)
    for flag in ("runs", "max_turns", "limit"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise CliError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    conditions = conditions_from_names(args.conditions)
    weights = _reward_weights(args)
    folder = _check_folder(args.beir_dir, args.split)
    if args.csv and not Path(args.csv).resolve().parent.is_dir():
        raise CliError(f"cannot write {args.csv}: its folder does not exist")
    queries = _load_queries(folder, args.split, args.limit)
    retriever = _open_retriever(folder, args.index_dir, args.retriever)
    config = HarnessConfig(max_turns=args.max_turns)
    started = time.perf_counter()
    entries = matrix_run(
        retriever,
        queries,
        conditions=conditions,
        policy_name=args.policy,
        runs=args.runs,
        config=config,
        weights=weights,
    )
    if args.csv:
        write_matrix_csv(args.csv, entries)
    _print_matrix(entries, args, folder.name, time.perf_counter() - started)
    return 0


def _print_matrix(
    entries: list[JSONObject], args: argparse.Namespace, dataset: str, took: float
) -> None:
    if args.json:
        report = matrix_report(
            entries,
            dataset=dataset,
            split=args.split,
            policy=args.policy,
            runs=args.runs,
            max_turns=args.max_turns,
            reward_preset=args.reward_preset,
            retriever=args.retriever,
            wall_seconds=took,
        )
        print(json.dumps(report))
        return
    print(format_matrix(entries))
    queries = entries[0]["n"]  # never empty: conditions_from_names names at least one
    print(f"({len(entries)} conditions x {args.runs} run(s) x {queries} queries, {took:.1f}s)")


# -- bench-retrieval and single-bm25 -------------------------------------------------------


def cmd_bench_retrieval(args: argparse.Namespace) -> int:
    folder = _check_folder(args.beir_dir, args.split)
    result = _bench_retrieval(folder, args)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['dataset']} ({result['split']}, {result['retriever']}, "
            f"{result['queries']} queries, {result['documents']} docs): "
            f"nDCG@10 {result['ndcg@10']:.4f}  recall@10 {result['recall@10']:.4f}  "
            f"recall@30 {result['recall@30']:.4f}  recall@100 {result['recall@100']:.4f}  "
            f"{result['queries_per_s']} queries/s"
        )
    return 0


def _bench_retrieval(folder: Path, args: argparse.Namespace) -> JSONObject:
    from harness_app.harness.retrieval import evaluate_beir
    from harness_app.harness.retrieval.dense import DenseIndexError
    from harness_app.harness.retrieval.encoder import EncoderUnavailableError
    from harness_app.harness.retrieval.evaluate import evaluate_retriever

    if args.retriever == "bm25":
        # evaluate_beir rebuilds its target from scratch, so never hand it the shared cache
        # directory itself: give it a sub-directory of its own.
        target = Path(args.index_dir) / f"bench-{folder.name}" if args.index_dir else None
        return evaluate_beir(folder, args.split, index_dir=target)
    index_dir = Path(args.index_dir) if args.index_dir else default_index_dir()
    try:
        return evaluate_retriever(folder, args.split, retriever=args.retriever, index_dir=index_dir)
    except (DenseIndexError, EncoderUnavailableError) as exc:
        raise CliError(f"cannot open the {args.retriever} retriever: {exc}") from None


def cmd_single_bm25(args: argparse.Namespace) -> int:
    folder = _check_folder(args.beir_dir, args.split)
    queries = _load_queries(folder, args.split, args.limit)
    retriever = _open_retriever(folder, args.index_dir, args.retriever)
    result: JSONObject = {"dataset": folder.name, "split": args.split, "n": len(queries)}
    for k in sorted(set(args.k)):
        if k < 1:
            raise CliError(f"--k must be at least 1, got {k}")
        scores = [single_search_recall(retriever, q, k) for q in queries]
        result[f"recall@{k}"] = round(statistics.fmean(s.curated for s in scores), 4)
        result[f"final_answer_recall@{k}"] = round(
            statistics.fmean(s.final_answer for s in scores), 4
        )
    print(json.dumps(result) if args.json else _plain(result))
    return 0


def _plain(result: JSONObject) -> str:
    return "  ".join(f"{key} {value}" for key, value in result.items())


# -- parser and entry point ------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness_app.harness", description="Evaluate search policies on BEIR."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_eval(commands)
    _add_ablate(commands)
    bench = _command(
        commands, "bench-retrieval", cmd_bench_retrieval, "nDCG@10/recall@k of a retriever"
    )
    bench.add_argument("--json", action="store_true", help="print the result as JSON")
    single = _command(commands, "single-bm25", cmd_single_bm25, "plain BM25 recall@k")
    single.add_argument("--k", type=int, nargs="+", default=[5, 10, 30], help="cut-offs")
    single.add_argument("--limit", type=int, help="only the first N judged queries")
    single.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _command(
    commands: Any, name: str, handler: Callable[[argparse.Namespace], int], text: str
) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
    sub.set_defaults(handler=handler)
    sub.add_argument("beir_dir", metavar="BEIR_DIR", help="folder with corpus.jsonl etc.")
    sub.add_argument("--split", default="test", help="qrels split (default: test)")
    sub.add_argument("--index-dir", help="BM25 index cache (default: user cache dir)")
    sub.add_argument(
        "--retriever",
        choices=("bm25", "dense", "hybrid"),
        default="bm25",
        help="the search tool's retriever (default: bm25)",
    )
    return sub


def _add_reward_preset(sub: argparse.ArgumentParser) -> None:
    presets = ", ".join(REWARD_PRESETS)
    sub.add_argument("--reward-preset", default="default", help=f"reward weights: {presets}")


def _add_eval(commands: Any) -> None:
    sub = _command(commands, "eval", cmd_eval, "run a policy over a benchmark")
    sub.add_argument("--policy", default="baseline", help="registered policy name")
    sub.add_argument("--limit", type=int, help="only the first N judged queries")
    sub.add_argument(
        "--ablate", nargs="+", default=[], metavar="MECHANISM", help="mechanisms to switch off"
    )
    sub.add_argument(
        "--all-ablations", action="store_true", help="full harness and each mechanism off"
    )
    sub.add_argument("--max-turns", type=int, default=40, help="turn budget per episode")
    sub.add_argument("--runs", type=int, default=1, help="repeat every condition N times")
    sub.add_argument("--out", help="write per-query rows (JSONL) here")
    sub.add_argument("--json", action="store_true", help="JSON lines even with --all-ablations")
    _add_reward_preset(sub)
    add_reader_arguments(sub)


def _add_ablate(commands: Any) -> None:
    sub = _command(commands, "ablate", cmd_ablate, "Harness-1's ablation conditions x N runs")
    sub.add_argument("--policy", default="baseline", help="registered policy name")
    sub.add_argument("--runs", type=int, default=1, help="repeat every condition N times")
    sub.add_argument("--limit", type=int, help="only the first N judged queries")
    sub.add_argument(
        "--conditions",
        metavar="A,B,...",
        help=f"comma-separated, default all: {', '.join(REFERENCE_CONDITIONS)}",
    )
    sub.add_argument("--csv", metavar="FILE", help="write the reference's CSV (means) here")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.add_argument("--max-turns", type=int, default=40, help="turn budget per episode")
    _add_reward_preset(sub)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (CliError, BeirFormatError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
