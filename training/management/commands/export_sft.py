"""Export annotated episodes as SFT JSONL: `manage.py export_sft --out FILE`.

The export is recorded like one made through the API (a row, its provenance, a file under
HARNESS_DATA_DIR/exports/), run here rather than by a worker, and copied to --out.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_app.harness.llm.reconstruct import PREFIX_MERGE
from training.models import ExportFormat, ExportStatus
from training.services.exports import ExportError, sft_export_create, sft_export_run


def parse_filters(items: list[str]) -> dict[str, str]:
    filters: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--filter {item!r}: expected key=value, e.g. batch=3")
        filters[key.strip()] = value.strip()
    return filters


class Command(BaseCommand):
    help = "Export episodes (approved ones unless --filter annotation_status=…) as SFT JSONL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, type=Path, help="the JSONL file to write")
        parser.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="an episode filter (batch, benchmark, policy, status, reward_min, q, ...)",
        )
        parser.add_argument("--format", choices=ExportFormat.values, default=ExportFormat.CHAT)
        parser.add_argument(
            "--reconstruction",
            default=PREFIX_MERGE,
            help="model calls as one record per chain (prefix_merge, the default) or per call "
            "(per_request)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        out: Path = options["out"]
        if out.exists() and out.is_dir():
            raise CommandError(f"--out {out} is a folder; name a file")
        try:
            export = sft_export_create(
                filters=parse_filters(options["filter"]),
                fmt=options["format"],
                reconstruction=options["reconstruction"],
                enqueue=False,
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        done = sft_export_run(export_id=export.pk)
        if done is None or done.status != ExportStatus.DONE:
            raise CommandError(f"export {export.pk} failed: {done.error if done else 'gone'}")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(done.file_path, out)
        manifest = done.manifest
        self.stdout.write(
            f"export {done.pk}: {done.episodes} episodes, {done.records} records, "
            f"{done.skipped} skipped -> {out} (sha256 {manifest['sha256']})"
        )
