"""python manage.py run_evaluation --benchmark NAME [NAME ...] --policy NAME [NAME ...]
[--conditions C ...] [--runs R] [--limit Q] [--max-turns T] [--name TEXT] [--wait] [--json]"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Model, QuerySet

from harness_app.harness.ablation import REFERENCE_CONDITIONS, condition_name
from harness_app.models import Benchmark, PolicyConfig
from trajectories.models import EvaluationRun
from trajectories.selectors import evaluations as selectors
from trajectories.services.evaluations import EvaluationParameterError, evaluation_create

Row = TypeVar("Row", bound=Model)


class Command(BaseCommand):
    help = (
        "Create an evaluation run (benchmarks x policy configs x conditions x runs, one rollout "
        "batch each); with --wait, follow it and print its mean ± std table."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--benchmark", nargs="+", required=True, metavar="NAME")
        parser.add_argument("--policy", nargs="+", required=True, metavar="NAME")
        parser.add_argument(
            "--conditions",
            nargs="+",
            default=["full"],
            type=condition_name,  # the reference's old names still work
            choices=list(REFERENCE_CONDITIONS),
        )
        parser.add_argument("--runs", type=int, default=3, help="runs per cell (default 3)")
        parser.add_argument("--limit", type=int, default=None, help="first Q queries only")
        parser.add_argument("--max-turns", type=int, default=40)
        parser.add_argument("--name", default="")
        parser.add_argument("--wait", action="store_true", help="wait for the run to finish")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        benchmarks = _named(Benchmark.objects.all(), opts["benchmark"], "benchmark")
        policies = _named(PolicyConfig.objects.all(), opts["policy"], "policy config")
        try:
            evaluation = evaluation_create(
                benchmarks=benchmarks,
                policies=policies,
                conditions=opts["conditions"],
                runs=opts["runs"],
                query_limit=opts["limit"],
                max_turns=opts["max_turns"],
                name=opts["name"],
            )
        except EvaluationParameterError as exc:
            raise CommandError(f"{exc.field or 'evaluation'}: {exc}") from exc
        total = selectors.evaluation_progress(evaluation=evaluation)["episodes_total"]
        self.stderr.write(
            f"evaluation run {evaluation.pk}: {evaluation.batches.count()} batches, "
            f"{total} episodes queued"
        )
        if opts["wait"]:
            self._follow(evaluation, opts["timeout"])
        result = evaluation_result(evaluation)
        self.stdout.write(json.dumps(result) if opts["json"] else _pretty(result))

    def _follow(self, evaluation: EvaluationRun, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            evaluation.refresh_from_db()
            progress = selectors.evaluation_progress(evaluation=evaluation)
            sys.stderr.write(
                f"\r  {progress['episodes_finished']}/{progress['episodes_total']} episodes, "
                f"{progress['batches_finished']}/{progress['batches_total']} batches finished"
            )
            if evaluation.is_finished:
                sys.stderr.write("\n")
                return
            time.sleep(0.5)
        raise CommandError(
            f"evaluation run {evaluation.pk} still {evaluation.status} after {timeout:.0f}s"
        )


def _named(rows: QuerySet[Row], names: list[str], what: str) -> list[Row]:
    found = rows.in_bulk(names, field_name="name")
    missing = [n for n in names if n not in found]
    if missing:
        known = ", ".join(rows.values_list("name", flat=True)) or "none"
        raise CommandError(f"no {what} named {', '.join(map(repr, missing))} (known: {known})")
    return [found[n] for n in names]


def evaluation_result(evaluation: EvaluationRun) -> dict[str, Any]:
    return {
        "evaluation": evaluation.pk,
        "name": evaluation.name,
        "progress": selectors.evaluation_progress(evaluation=evaluation),
        "configs": [
            {"key": c.key, "label": c.label}
            for c in selectors.evaluation_configs(evaluation=evaluation)
        ],
        "table": selectors.evaluation_table(evaluation=evaluation),
    }


def _pretty(result: dict[str, Any]) -> str:
    table = result["table"]
    header = ["benchmark", "configuration", "runs", "n", "failed", *table["metrics"]]
    lines = [
        [r["benchmark"], r["config"], str(r["runs"]), str(r["n"]), str(r["failed"]), *r["cells"]]
        for r in table["rows"]
    ]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    progress = result["progress"]
    title = (
        f"evaluation run {result['evaluation']} {progress['status']}: "
        f"{progress['episodes_finished']}/{progress['episodes_total']} episodes finished"
    )
    body = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    ]
    return "\n".join([title, *body])
