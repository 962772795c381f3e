"""python manage.py recording_report [--task KEY] [--session ID ...] [--substeps N]
[--max-sequence-tokens T] [--sequences-per-update S] [--json]

Prefix merging against per-request reconstruction on recorded sessions (Polar's Fig. 5b):
sequences, tokens processed, trained tokens and trainer updates for each strategy, and the
chain breaks by reason. The trainer settings default to an RL job's (substeps 1, no length
cap); --sequences-per-update models a trainer with fixed-size minibatches instead.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_app.harness.llm.reconstruct_report import TrainerShape, report_table
from trajectories.selectors.recording import recording_report, recording_sessions


class Command(BaseCommand):
    help = "Compare prefix merging and per-request reconstruction on recorded sessions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--task", default=None, help="only this task's sessions")
        parser.add_argument(
            "--session", type=int, nargs="+", default=[], metavar="ID", help="only these"
        )
        parser.add_argument("--substeps", type=int, default=1, help="optimiser steps per batch")
        parser.add_argument("--max-sequence-tokens", type=int, default=None)
        parser.add_argument(
            "--sequences-per-update",
            type=int,
            default=None,
            help="a trainer with fixed-size minibatches: sequences per optimiser step",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = recording_sessions()
        if options["task"] is not None:
            sessions = sessions.filter(task=options["task"])
        if options["session"]:
            wanted = set(options["session"])
            found = set(sessions.filter(pk__in=wanted).values_list("pk", flat=True))
            if missing := sorted(wanted - found):
                raise CommandError(f"--session: no recording session {missing}{_task(options)}")
            sessions = sessions.filter(pk__in=wanted)
        try:
            shape = TrainerShape(
                substeps=options["substeps"],
                max_sequence_tokens=options["max_sequence_tokens"],
                sequences_per_update=options["sequences_per_update"],
            )
        except ValueError as exc:
            raise CommandError(f"--{str(exc).replace('_', '-')}") from None
        if not sessions.exists():
            raise CommandError(f"no recording sessions{_task(options)}")
        report = recording_report(sessions=sessions, shape=shape)
        if options["json"]:
            self.stdout.write(json.dumps(report.to_json(), indent=2))
        else:
            self.stdout.write(report_table(report))


def _task(options: dict[str, Any]) -> str:
    return f" with task {options['task']!r}" if options["task"] is not None else ""
