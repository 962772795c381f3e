"""python manage.py run_batch --benchmark NAME --policy NAME [--samples N] [--limit Q]
[--ablate M ...] [--max-turns T] [--termination last_tool|max_turns] [--wait] [--json]
python manage.py run_batch --resend BATCH_ID   (a batch whose episodes could not be sent)

When the task broker is down the batch is kept, failed with the reason, and the command
prints an `error:` line saying so and how to re-send it, and exits 1."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_app import jobs, queues
from harness_app.models import Benchmark, PolicyConfig
from trajectories.models import BatchStatus, RolloutBatch
from trajectories.prefixes import PrefixFileError, prefixes_read
from trajectories.selectors.batches import batch_summary
from trajectories.services.resends import BatchNotResendable, batch_resend
from trajectories.services.rollouts import BatchParameterError, batch_create, rollout_queue

FINISHED = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED)


class Command(BaseCommand):
    help = "Create a rollout batch; with --wait, follow it and print its aggregate metrics."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--benchmark")
        parser.add_argument("--policy")
        parser.add_argument(
            "--resend",
            type=int,
            metavar="BATCH_ID",
            help="send again a batch whose episodes could not be sent (the broker was down)",
        )
        parser.add_argument("--samples", type=int, default=1, help="samples per query (group size)")
        parser.add_argument("--limit", type=int, default=None, help="first Q queries only")
        parser.add_argument("--ablate", nargs="*", default=[], metavar="MECHANISM")
        parser.add_argument("--max-turns", type=int, default=40)
        parser.add_argument(
            "--termination", default="max_turns", choices=["max_turns", "last_tool"]
        )
        parser.add_argument(
            "--prefix-file",
            type=Path,
            default=None,
            help='train.jsonl: one {"query_id", "messages"} per line to start episodes from',
        )
        parser.add_argument("--wait", action="store_true", help="wait for the batch to finish")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        resend = opts["resend"]
        batch = self._create(opts) if resend is None else self._resend(resend)
        reason = jobs.send_error(batch)
        if reason:
            self.stderr.write(
                f"error: batch {batch.pk} was not sent: {reason}\n"
                f"  re-send it once the broker is back: manage.py run_batch --resend {batch.pk}"
            )
            sys.exit(1)
        self.stderr.write(f"batch {batch.pk}: {batch.episodes_total} episodes queued")
        if opts["wait"]:
            self._follow(batch, opts["timeout"])
        summary = batch_summary(batch=batch)
        self.stdout.write(json.dumps(summary) if opts["json"] else _pretty(summary))

    def _resend(self, batch_id: int) -> RolloutBatch:
        batch = RolloutBatch.objects.filter(pk=batch_id).first()
        if batch is None:
            raise CommandError(f"no batch {batch_id}")
        try:
            batch_resend(batch=batch)
        except BatchNotResendable as exc:
            raise CommandError(str(exc)) from exc
        return batch

    def _create(self, opts: dict[str, Any]) -> RolloutBatch:
        for name in ("benchmark", "policy"):
            if not opts[name]:
                raise CommandError(f"--{name} is required (or --resend BATCH_ID)")
        benchmark = Benchmark.objects.filter(name=opts["benchmark"]).first()
        if benchmark is None:
            raise CommandError(f"no benchmark named {opts['benchmark']!r}")
        policy = PolicyConfig.objects.filter(name=opts["policy"]).first()
        if policy is None:
            names = ", ".join(PolicyConfig.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no policy config named {opts['policy']!r} (known: {names})")
        try:
            prefixes = prefixes_read(opts["prefix_file"]) if opts["prefix_file"] else None
            batch = batch_create(
                benchmark=benchmark,
                policy=policy,
                samples_per_query=opts["samples"],
                query_limit=opts["limit"],
                ablate=opts["ablate"],
                max_turns=opts["max_turns"],
                termination_policy=opts["termination"],
                prefixes=prefixes,
            )
        except (BatchParameterError, PrefixFileError) as exc:
            raise CommandError(str(exc)) from exc
        return batch

    def _follow(self, batch: RolloutBatch, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        queue = rollout_queue(batch.policy)
        warned = False
        while time.monotonic() < deadline:
            batch.refresh_from_db()
            done = batch.episodes_completed + batch.episodes_failed
            if done == 0 and not warned:
                warned = self._warn_unserved(queue)
            sys.stderr.write(f"\r  {done}/{batch.episodes_total} episodes finished")
            if batch.status in FINISHED:
                sys.stderr.write("\n")
                return
            time.sleep(0.5)
        raise CommandError(f"batch {batch.pk} still {batch.status} after {timeout:.0f}s")

    def _warn_unserved(self, queue: str) -> bool:
        """Say so when no live worker consumes the batch's queue: its episodes would sit
        at 0/N until one does. True once warned."""
        try:
            missing = queues.queues_without_consumers([queue])
        except Exception as exc:  # the broker is down: the episodes could not be sent either
            self.stderr.write(f"\nwarning: could not ask the workers ({type(exc).__name__})")
            return True
        if missing:
            self.stderr.write(
                f"\nwarning: no live worker consumes the queue {queue!r}, so this batch "
                f"waits until one does; start one with: celery -A config worker "
                f"--queues={queue}"
            )
        return bool(missing)


def _pretty(summary: dict[str, Any]) -> str:
    lines = [
        f"batch {summary['batch']} {summary['status']}: {summary['benchmark']} x "
        f"{summary['policy']} ({summary['ablation']})"
    ]
    lines += [f"  {k:22} {v}" for k, v in summary["metrics"].items()]
    lines.append(f"  termination reasons    {summary['termination_reasons']}")
    return "\n".join(lines)
