"""SFT exports and jobs left `running` by a worker that died fail with the reason when a
worker starts; one a live worker still holds is left alone."""

from __future__ import annotations

import pytest

from harness_app import jobs, queues
from tests.training_sft.jobs import job_create
from training.models import ExportStatus, SFTExport, SFTJob, SFTJobStatus
from training.services.exports import export_path

pytestmark = pytest.mark.django_db


def test_an_export_whose_worker_died_fails_and_its_partial_file_goes(export) -> None:
    SFTExport.objects.filter(pk=export.pk).update(status=ExportStatus.RUNNING)
    target = export_path(export)
    partial = target.with_name(f"{target.name}.abc123.partial")
    partial.write_text("half a line")

    assert jobs.recover(in_hand={(queues.SFT_EXPORT, (export.pk + 1,))})["training.SFTExport"] == 1
    export.refresh_from_db()
    assert export.status == ExportStatus.FAILED
    assert export.error.startswith("worker_lost: ")
    assert not partial.exists() and target.is_file()


def test_an_export_a_live_worker_holds_is_left_alone(export) -> None:
    SFTExport.objects.filter(pk=export.pk).update(status=ExportStatus.RUNNING)
    assert jobs.recover(in_hand={(queues.SFT_EXPORT, (export.pk,))})["training.SFTExport"] == 0
    export.refresh_from_db()
    assert export.status == ExportStatus.RUNNING


def test_an_sft_job_whose_worker_died_fails_with_the_reason(
    export, llm_policy, weights_dir
) -> None:
    lost = job_create(export, llm_policy, weights_dir)
    held = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk__in=[lost.pk, held.pk]).update(status=SFTJobStatus.RUNNING)

    assert jobs.recover(in_hand={(queues.SFT_JOB_RUN, (held.pk,))})["training.SFTJob"] == 1
    lost.refresh_from_db()
    held.refresh_from_db()
    assert lost.status == SFTJobStatus.FAILED and lost.finished_at is not None
    assert lost.error.startswith("worker_lost: ")
    assert held.status == SFTJobStatus.RUNNING
