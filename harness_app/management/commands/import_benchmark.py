"""Import a benchmark from the command line, with a progress bar on stderr.

manage.py import_benchmark PATH --name NAME [--format FORMAT] [--split test] [--replace]

FORMAT is one of beir, hotpotqa, musique, 2wikimultihopqa, browsecomp-plus, frames; without
it the format is detected from the folder's layout or the file's first record.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_app.harness.beir import BeirFormatError
from harness_app.importers.formats import FORMATS, format_detect
from harness_app.importers.records import ImportProgress, ImportRejected
from harness_app.services.benchmarks import benchmark_import


class ProgressBar:
    """One self-overwriting line on stderr: phase, bar, documents and documents per second."""

    WIDTH = 30

    def __init__(self, stream: TextIO, *, interval: float = 0.2) -> None:
        self.stream = stream
        self.interval = interval
        self._shown = 0.0
        self._phase = ""
        self._line = ""

    def __call__(self, state: ImportProgress) -> None:
        if self._phase and state.phase != self._phase:
            self._show(self._line)  # the finished phase's final figures stay on screen
            self.stream.write("\n")
            self._shown = 0.0
        self._phase, self._line = state.phase, self.render(state)
        if time.monotonic() - self._shown >= self.interval:
            self._show(self._line)

    def _show(self, line: str) -> None:
        self.stream.write("\r" + line)
        self.stream.flush()
        self._shown = time.monotonic()

    def render(self, state: ImportProgress) -> str:
        rate = f"{state.rate:>9,.0f} docs/s"
        if not state.total_documents:
            return f"{state.phase:<9} {state.documents:>11,} docs {rate}"
        share = min(state.documents / state.total_documents, 1.0)
        bar = "#" * round(share * self.WIDTH)
        done = f"{state.documents:,}/{state.total_documents:,}"
        return f"{state.phase:<9} [{bar:<{self.WIDTH}}] {share:>4.0%} {done} docs {rate}"

    def close(self) -> None:
        if self._phase:
            self._show(self._line)
            self.stream.write("\n")
            self.stream.flush()


class Command(BaseCommand):
    help = "Import a benchmark folder or file (docs/corpora.md), all or nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="benchmark folder or file")
        parser.add_argument("--name", required=True, help="benchmark name")
        parser.add_argument(
            "--format",
            dest="fmt",
            choices=FORMATS,
            help="default: detected from the folder's layout or the file's first record",
        )
        parser.add_argument("--split", default="test", help="BEIR qrels split (default test)")
        parser.add_argument(
            "--replace", action="store_true", help="swap out an existing benchmark of this name"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        bar = None if options["no_progress"] else ProgressBar(sys.stderr)
        started = time.monotonic()
        try:
            fmt = options["fmt"] or format_detect(path)
            result = benchmark_import(
                path=path,
                name=options["name"],
                fmt=fmt,
                split=options["split"],
                replace=options["replace"],
                progress=bar,
            )
        except (ImportRejected, BeirFormatError) as exc:
            raise CommandError(f"{exc}\nNothing was written.") from None
        finally:
            if bar:
                bar.close()
        self.stdout.write(result.describe(options["name"]))
        self.stdout.write(f"  took {time.monotonic() - started:.1f} s")
