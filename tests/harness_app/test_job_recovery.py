"""One worker start-up handler recovers every kind of job whose worker died.

Each case leaves one row of a kind as a dead worker leaves it (running, its task held by no
live worker; an episode with a stale heartbeat), starts "a worker" by sending Celery's
worker_ready signal, and checks what the kind's recovery did.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.signals import worker_ready
from django.utils import timezone

from harness_app import queues
from harness_app.models import ImportJob, ImportStatus
from tests import factories
from training.models import (
    ExportStatus,
    RLJob,
    RLJobStatus,
    SFTExport,
    SFTJob,
    SFTJobStatus,
)
from trajectories.models import (
    AblationMatrix,
    Episode,
    EpisodeStatus,
    EvaluationStatus,
    HarnessRun,
    HarnessRunStatus,
    MatrixStatus,
)
from trajectories.services import harness_runs, rollouts
from trajectories.services.evaluations import evaluation_create

pytestmark = pytest.mark.django_db

Sent = list[tuple[str, tuple[Any, ...]]]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    calls: Sent = []
    monkeypatch.setattr(queues, "enqueue", lambda task, *args, **_: calls.append((task, args)))
    # No live worker holds any task: every running row lost its worker.
    monkeypatch.setattr(queues, "tasks_in_hand", lambda **_: frozenset())
    return calls


def _worker_starts() -> None:
    worker_ready.send(sender=None)


def _stale(episode: Episode) -> None:
    long_ago = timezone.now() - timedelta(hours=1)
    Episode.objects.filter(pk=episode.pk).update(
        status=EpisodeStatus.RUNNING, heartbeat_at=long_ago, attempts=1
    )


def _import_job(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    upload = tmp_path / "upload.json"
    upload.write_text("[]")
    job = ImportJob.objects.create(
        name="x", fmt="hotpotqa", upload_path=str(upload), status=ImportStatus.RUNNING
    )

    def check() -> None:
        job.refresh_from_db()
        assert job.status == ImportStatus.QUEUED  # run again from its upload, once
        assert job.message.startswith("worker_lost: ")
        assert sent == [(queues.IMPORT_JOB_RUN, (job.pk,))]

    return check


def _rollout_batch(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    batch = rollouts.batch_create(
        benchmark=factories.demo_benchmark(), policy=factories.baseline_policy(), query_limit=1
    )
    episode = batch.episodes.get()
    _stale(episode)

    def check() -> None:
        episode.refresh_from_db()
        assert episode.status == EpisodeStatus.PENDING
        assert sent == [(queues.EPISODE_RUN, (episode.pk,))]

    return check


def _evaluation_run(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    evaluation = evaluation_create(
        benchmarks=[factories.demo_benchmark()],
        policies=[factories.baseline_policy()],
        runs=1,
        query_limit=1,
    )
    episode = Episode.objects.get(batch__evaluation=evaluation)
    _stale(episode)

    def check() -> None:
        # Its batches' episodes are sent again; the evaluation runs on until they finish.
        episode.refresh_from_db()
        evaluation.refresh_from_db()
        assert episode.status == EpisodeStatus.PENDING
        assert sent == [(queues.EPISODE_RUN, (episode.pk,))]
        assert evaluation.status == EvaluationStatus.RUNNING

    return check


def _ablation_matrix(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    matrix = AblationMatrix.objects.create(
        benchmark=factories.demo_benchmark(), status=MatrixStatus.RUNNING
    )

    def check() -> None:
        matrix.refresh_from_db()
        assert matrix.status == MatrixStatus.FAILED and matrix.finished_at is not None
        assert matrix.error.startswith("worker_lost: ")

    return check


def _harness_run(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    task = harness_runs.harness_task_create(
        name="t", instruction="do it", files={"a.txt": "a"}, eval_command="true"
    )
    group = harness_runs.harness_group_launch(
        task=task, kind="command", command=["true"], model="m", size=1, enqueue=False
    )
    run = group.runs.get()
    HarnessRun.objects.filter(pk=run.pk).update(status=HarnessRunStatus.RUNNING)

    def check() -> None:
        run.refresh_from_db()
        assert run.status == HarnessRunStatus.ERROR and run.error.startswith("worker_lost: ")
        assert run.session.closed_at is not None  # its recording session is closed too

    return check


def _sft_export(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    export = SFTExport.objects.create(status=ExportStatus.RUNNING)

    def check() -> None:
        export.refresh_from_db()
        assert export.status == ExportStatus.FAILED and export.error.startswith("worker_lost: ")

    return check


def _sft_job(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    job = SFTJob.objects.create(
        export=SFTExport.objects.create(status=ExportStatus.DONE),
        base_policy=factories.baseline_policy(),
        base_model_dir=str(tmp_path),
        status=SFTJobStatus.RUNNING,
    )

    def check() -> None:
        job.refresh_from_db()
        assert job.status == SFTJobStatus.FAILED and job.error.startswith("worker_lost: ")

    return check


def _rl_job(tmp_path: Path, sent: Sent) -> Callable[[], None]:
    job = RLJob.objects.create(
        benchmark=factories.demo_benchmark(),
        base_policy=factories.baseline_policy(),
        base_model_dir=str(tmp_path),
        status=RLJobStatus.RUNNING,
    )

    def check() -> None:
        # Between two steps a job runs with no task in hand, and each step is acked late:
        # the broker redelivers a dead worker's step, so the handler leaves the job be.
        job.refresh_from_db()
        assert job.status == RLJobStatus.RUNNING and sent == []

    return check


KINDS = {
    "ImportJob": _import_job,
    "RolloutBatch": _rollout_batch,
    "EvaluationRun": _evaluation_run,
    "AblationMatrix": _ablation_matrix,
    "HarnessRun": _harness_run,
    "SFTExport": _sft_export,
    "SFTJob": _sft_job,
    "RLJob": _rl_job,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_one_start_up_handler_recovers_each_job_kind(kind, tmp_path, sent):
    check = KINDS[kind](tmp_path, sent)
    sent.clear()  # what creating the rows sent
    _worker_starts()
    check()


def test_one_start_up_handler_recovers_jobs_for_every_app():
    handlers = [
        receiver
        for _, receiver in worker_ready.receivers
        if getattr(receiver(), "__module__", "").split(".")[0]
        in ("harness_app", "trajectories", "training")
    ]
    assert [h().__module__ for h in handlers] == ["harness_app.tasks"]
