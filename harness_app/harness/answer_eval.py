"""The reader step of `eval`: answer each episode's question from its documents and score it.

    python -m harness_app.harness eval DATA --reader URL [--reader-model NAME]
        [--reader-docs curated|gold] [--reader-judge [--judge-url URL] [--judge-model NAME]]
        [--reader-context-chars 6000]

With --reader, each per-query row gains `reader_answer`, `reader` (model, doc ids shown,
tokens, latency, error) and, when the call worked and the query has a gold answer,
`answer_em` and `answer_f1` (and `answer_judge` with --reader-judge). The aggregate gains
their means over the scored rows, `answer_n` (how many were scored) and `reader_errors`.
`--reader-docs gold` hands the reader the judged documents instead of the curated set:
the oracle row that bounds what a better search could buy.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_app.harness.reader import (
    CuratedLike,
    Reader,
    ReaderConfig,
    answer_fields,
    curated_order,
    documents_of,
    gold_order,
    served_model,
)
from harness_app.harness.types import QuerySpec, Retriever

# Per-query values averaged over the rows that have them (a failed reading has none).
ANSWER_METRICS = ("answer_em", "answer_f1", "answer_judge")
DOC_SOURCES = ("curated", "gold")


@dataclass(frozen=True)
class AnswerStep:
    """The reader, and what it reads: the curated set or, for the oracle, the gold docs."""

    reader: Reader
    docs: str = "curated"
    judge: bool = False

    def fields(
        self, query: QuerySpec, curated: Mapping[str, CuratedLike], retriever: Retriever
    ) -> dict[str, Any]:
        ids = gold_order(query.qrels) if self.docs == "gold" else curated_order(curated)
        return answer_fields(self.reader, query, documents_of(retriever, ids), judge=self.judge)


def add_reader_arguments(sub: argparse.ArgumentParser) -> None:
    group = sub.add_argument_group("reader (answer accuracy, paper Fig. 6)")
    group.add_argument("--reader", metavar="URL", help="OpenAI-compatible base URL (…/v1)")
    group.add_argument("--reader-model", help="model name (default: the first one served)")
    group.add_argument(
        "--reader-docs", choices=DOC_SOURCES, default="curated", help="what the reader reads"
    )
    group.add_argument(
        "--reader-context-chars", type=int, default=6000, help="the documents' character budget"
    )
    group.add_argument("--reader-judge", action="store_true", help="also ask an LLM judge")
    group.add_argument("--judge-url", help="the judge's base URL (default: the reader's)")
    group.add_argument("--judge-model", help="the judge's model (default: the reader's)")


def answer_step_from_args(args: argparse.Namespace) -> AnswerStep | None:
    """The reader the flags ask for, or None without --reader; ValueError names the flag.
    The API key comes from READER_API_KEY (JUDGE_API_KEY for the judge), never a flag."""
    if not args.reader:
        for flag in ("reader_judge", "judge_url", "judge_model", "reader_model"):
            if getattr(args, flag):
                raise ValueError(f"--{flag.replace('_', '-')} needs --reader URL")
        return None
    key = os.environ.get("READER_API_KEY", "EMPTY")
    model = args.reader_model or served_model(args.reader, api_key=key)
    config = ReaderConfig(
        base_url=args.reader, model=model, api_key=key, max_context_chars=args.reader_context_chars
    )
    judge = None
    if args.reader_judge:
        judge_url = args.judge_url or args.reader
        judge_key = os.environ.get("JUDGE_API_KEY", key)
        judge_model = args.judge_model or (
            model if judge_url == args.reader else served_model(judge_url, api_key=judge_key)
        )
        judge = ReaderConfig(base_url=judge_url, model=judge_model, api_key=judge_key)
    reader = Reader(config, judge=judge)
    return AnswerStep(reader=reader, docs=args.reader_docs, judge=args.reader_judge)


def answer_means(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Means of the answer metrics over the rows that have them; {} without a reader."""
    if not any("reader" in row for row in rows):
        return {}
    means: dict[str, float] = {
        "answer_n": float(sum("answer_em" in row for row in rows)),
        "reader_errors": float(
            sum(bool(row["reader"]["error"]) for row in rows if "reader" in row)
        ),
    }
    for name in ANSWER_METRICS:
        values = [float(row[name]) for row in rows if name in row]
        if values:
            means[name] = statistics.fmean(values)
    return means
