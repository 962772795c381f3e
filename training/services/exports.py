"""Every write of the training app: SFT exports.

An export is created (`sft_export_create`: filters checked, an export of no episode
refused naming the filter that emptied it, row written, task queued on commit) and then run
once by a worker (`sft_export_run`), which counts its progress on the row chunk by chunk:
the JSONL is written beside its final name and renamed into place in the transaction that
records the provenance rows and marks the export done. A done export is never run or
written again; a new export is a new row and a new file. A crashed run leaves a running
export that a redelivered task redoes from the start, or that the job kernel's recovery
(harness_app/jobs.py) fails when a worker starts and none holds it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from harness_app import jobs, queues
from harness_app.harness.llm.reconstruct import strategy_clean
from training.models import (
    ExportFormat,
    ExportStatus,
    Reconstruction,
    SFTExport,
    SFTExportEpisode,
)
from training.sft import records as sft
from trajectories.episode_filters import (
    EpisodeFilterError,
    FilterClause,
    episode_filter_clauses,
    episode_filters_clean,
    episode_filters_empty_reason,
    episodes_matching,
)
from trajectories.models import AnnotationStatus, Episode

log = logging.getLogger(__name__)

CHUNK = 200  # episodes rendered per round of queries


class ExportError(ValueError):
    """An export request that cannot run; the message names the parameter."""


# Said of the annotation-status clause when the export added it (export_filters).
APPROVED_ONLY_NOTE = "approved only: the default without an annotation status"


def export_filters(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Checked filters. Without an annotation status only approved episodes are taken,
    except episodes chosen by id (`ids`, the episode list's ticked rows): a researcher who
    picked them by hand gets them whatever their label, and the form shows those labels."""
    try:
        filters = episode_filters_clean(raw)
    except EpisodeFilterError as exc:
        raise ExportError(str(exc)) from exc
    if "ids" not in filters:
        filters.setdefault("annotation_status", AnnotationStatus.APPROVED)
    return filters


@dataclass(frozen=True)
class ExportPreview:
    """What an export with these filters would take, before it is made (the form's count)."""

    filters: dict[str, Any]  # as the export would store them
    approved_only: bool  # the annotation status is export_filters' default
    clauses: list[FilterClause]  # clause by clause, up to the first that leaves none
    matching: int
    by_annotation: list[tuple[str, int]]  # (status label, episodes), in the choices' order
    empty_reason: str  # why it matches no episode; "" when it matches some

    @property
    def chosen_whatever_their_label(self) -> bool:
        """Episodes chosen by id, with no annotation status: "approved only" is off."""
        return "ids" in self.filters and "annotation_status" not in self.filters


def sft_export_preview(*, filters: Mapping[str, Any]) -> ExportPreview:
    """Count the episodes an export with these filters would take, clause by clause (the
    form's count, and the reason `sft_export_create` gives for refusing none); ExportError
    names a bad filter."""
    checked = export_filters(filters)
    given = str(filters.get("annotation_status") or "").strip()
    approved_only = "annotation_status" in checked and not given
    clauses = episode_filter_clauses(filters=checked)
    matching = clauses[-1].matching if clauses else episodes_matching(filters={}).count()
    notes = {"annotation_status": APPROVED_ONLY_NOTE} if approved_only else {}
    statuses = episodes_matching(filters=checked).order_by().values_list("annotation_status")
    counts = dict(statuses.annotate(n=Count("pk")))
    return ExportPreview(
        filters=checked,
        approved_only=approved_only,
        clauses=clauses,
        matching=matching,
        by_annotation=[
            (label, counts[value]) for value, label in AnnotationStatus.choices if value in counts
        ],
        empty_reason=episode_filters_empty_reason(clauses, notes=notes),
    )


@transaction.atomic
def sft_export_create(
    *,
    created_by: Any = None,
    filters: Mapping[str, Any] | None = None,
    fmt: str = ExportFormat.CHAT,
    reconstruction: str = Reconstruction.PREFIX_MERGE,
    enqueue: bool = True,
) -> SFTExport:
    """Write a queued export and, once committed, send its task (unless `enqueue` is off,
    for a caller that runs it inline, like the export_sft command).

    `reconstruction` is the strategy for model calls (prefix_merge or per_request; the
    older "prefix" and "request" are accepted); an unknown one is refused by name."""
    if fmt not in ExportFormat.values:
        raise ExportError(f"format {fmt!r} is not one of {', '.join(ExportFormat.values)}")
    try:
        strategy = strategy_clean(reconstruction, field="reconstruction")
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    checked = export_filters(filters or {})
    if not episodes_matching(filters=checked).exists():
        raise ExportError(sft_export_preview(filters=filters or {}).empty_reason)
    export = SFTExport.objects.create(
        created_by=created_by if getattr(created_by, "pk", None) else None,
        filters=checked,
        fmt=fmt,
        reconstruction=strategy,
    )
    if enqueue:
        jobs.enqueue(export, queues.SFT_EXPORT)
    return export


def export_path(export: SFTExport) -> Path:
    return settings.DATA_DIR / "exports" / f"sft-{export.pk:06d}-{export.fmt}.jsonl"


@jobs.lost(SFTExport)
def _export_lost(export: SFTExport) -> None:
    """An export marked running whose task no live worker holds lost its worker: it
    fails, saying so, and the partial files its runs left are removed."""
    target = export_path(export)
    for partial in target.parent.glob(f"{target.name}.*.partial"):
        partial.unlink(missing_ok=True)
    jobs.fail(export, f"{jobs.WORKER_LOST}: its worker died while writing the file; export again")


@dataclass
class _Written:
    episodes: int = 0
    records: int = 0
    skipped: int = 0
    renderings: dict[str, int] = field(default_factory=dict)
    items: list[SFTExportEpisode] = field(default_factory=list)


def sft_export_run(*, export_id: int) -> SFTExport | None:
    """Write the export's file and provenance; a finished export is left exactly as it is."""
    export = _export_claim(export_id)
    if export is None:
        return SFTExport.objects.filter(pk=export_id).first()
    target = export_path(export)
    # A name of its own per run: a duplicate delivery must not write into this one's file.
    partial = target.with_name(f"{target.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        digest, size, written = _file_write(export, partial)
        _export_finish(export, partial, target, digest, size, written)
    except Exception as exc:
        log.exception("SFT export %s failed", export_id)
        partial.unlink(missing_ok=True)
        jobs.fail(export, f"{type(exc).__name__}: {exc}")
    export.refresh_from_db()
    return export


def _export_claim(export_id: int) -> SFTExport | None:
    # A redelivered run starts over.
    return jobs.claim(SFTExport, export_id, episodes=0, records=0, skipped=0)


def _export_episodes(export: SFTExport) -> Iterator[list[Episode]]:
    """The matching episodes in id order, CHUNK at a time, with what rendering reads."""
    ids = list(
        episodes_matching(filters=export.filters).order_by("pk").values_list("pk", flat=True)
    )
    for start in range(0, len(ids), CHUNK):
        chunk = Episode.objects.filter(pk__in=ids[start : start + CHUNK]).order_by("pk")
        yield list(chunk.select_related("batch__policy", "group"))


def _file_write(export: SFTExport, partial: Path) -> tuple[str, int, _Written]:
    written = _Written()
    digest = hashlib.sha256()
    size = 0
    with open(partial, "wb") as sink:
        for chunk in _export_episodes(export):
            how = export.reconstruction
            rows = sft.rows_load(chunk, fmt=export.fmt, reconstruction=how)
            for episode, rendered in sft.records_render(rows, fmt=export.fmt, reconstruction=how):
                key = rendered.how
                written.renderings[key] = written.renderings.get(key, 0) + 1
                if not rendered.records:
                    written.skipped += 1
                    continue
                lines = [_json_line(r) for r in rendered.records]
                blob = b"".join(lines)
                written.items.append(
                    SFTExportEpisode(
                        export=export,
                        episode=episode,
                        first_line=written.records,
                        records=len(lines),
                        sha256=hashlib.sha256(blob).hexdigest(),
                    )
                )
                sink.write(blob)
                digest.update(blob)
                size += len(blob)
                written.records += len(lines)
                written.episodes += 1
            _progress_save(export, written)
        sink.flush()
        os.fsync(sink.fileno())
    return digest.hexdigest(), size, written


def _progress_save(export: SFTExport, written: _Written) -> None:
    """The counts so far, for the export's page while it runs."""
    SFTExport.objects.filter(pk=export.pk, status=ExportStatus.RUNNING).update(
        episodes=written.episodes, records=written.records, skipped=written.skipped
    )


def _json_line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


@transaction.atomic
def _export_finish(
    export: SFTExport, partial: Path, target: Path, digest: str, size: int, written: _Written
) -> None:
    current = SFTExport.objects.select_for_update().get(pk=export.pk)
    if current.status != ExportStatus.RUNNING:  # another run of a duplicate task finished
        partial.unlink(missing_ok=True)
        return
    SFTExportEpisode.objects.filter(export=export).delete()  # left by a crashed attempt
    SFTExportEpisode.objects.bulk_create(written.items, batch_size=2_000)
    finished = timezone.now()
    manifest = {
        "export": export.pk,
        "format": export.fmt,
        "reconstruction": export.reconstruction,
        "filters": export.filters,
        "file": target.name,
        "bytes": size,
        "sha256": digest,
        "episodes": written.episodes,
        "records": written.records,
        "skipped": written.skipped,
        "renderings": dict(sorted(written.renderings.items())),
        "episode_ids_sha256": _ids_digest(item.episode_id for item in written.items),
        "created_at": export.created_at.isoformat(),
        "finished_at": finished.isoformat(),
    }
    jobs.finish(
        current,
        episodes=written.episodes,
        records=written.records,
        skipped=written.skipped,
        manifest=manifest,
        file_path=str(target),
        finished_at=finished,
        error="",
    )
    # Last, so a failure above leaves no file under the final name; a failed commit after
    # it leaves a file that the export's next run (it is still running) replaces.
    os.replace(partial, target)


def _ids_digest(ids: Iterator[int]) -> str:
    return hashlib.sha256(",".join(str(i) for i in ids).encode()).hexdigest()
