"""manage.py export_benchmark NAME DIR: write a benchmark back out as a BEIR folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_app.models import Benchmark
from harness_app.services.exports import benchmark_export


class Command(BaseCommand):
    help = "Write a benchmark as corpus.jsonl, queries.jsonl and qrels/<split>.tsv under DIR."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="benchmark name")
        parser.add_argument("directory", type=Path, help="folder to write (created if missing)")

    def handle(self, *args: Any, **options: Any) -> None:
        benchmark = Benchmark.objects.filter(name=options["name"]).first()
        if benchmark is None:
            raise CommandError(f"no benchmark named {options['name']!r}")
        counts = benchmark_export(benchmark=benchmark, directory=options["directory"])
        self.stdout.write(
            f"Wrote {counts.documents:,} documents, {counts.queries:,} queries and "
            f"{counts.qrels:,} qrels to {options['directory']}"
        )
