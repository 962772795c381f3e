"""The job kernel (harness_app/jobs.py), on the import job, its first kind: sent on commit,
failed with the reason when the broker is down, claimed, finished once with the `finished`
signal, failed, and recovered after a dead worker by the one start-up handler."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import jobs, queues
from harness_app.models import ImportJob, ImportStatus
from tests.harness_app.conftest import HOTPOT

pytestmark = pytest.mark.django_db


def _job(tmp_path: Path, **fields: Any) -> ImportJob:
    upload = tmp_path / "upload.json"
    upload.write_text("[]")
    return ImportJob.objects.create(name="x", fmt="hotpotqa", upload_path=str(upload), **fields)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    calls: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(queues, "enqueue", lambda task, *args, **_: calls.append((task, args)))
    return calls


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*args: Any, **kwargs: Any) -> None:
        raise KombuOperationalError("connection refused")

    monkeypatch.setattr(queues, "enqueue", down)


@pytest.fixture
def finished_jobs() -> Any:
    seen: list[tuple[type, int, str]] = []

    def listen(sender: type, job: Any, **_: Any) -> None:
        seen.append((sender, job.pk, job.status))

    jobs.finished.connect(listen)
    yield seen
    jobs.finished.disconnect(listen)


def test_a_job_is_sent_only_once_its_row_is_committed(
    tmp_path, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        job = _job(tmp_path)
        jobs.enqueue(job, queues.IMPORT_JOB_RUN)
        assert sent == []  # not before the commit
    assert len(callbacks) == 1
    assert sent == [(queues.IMPORT_JOB_RUN, (job.pk,))]
    assert jobs.send_error(job) == ""


def test_a_broker_that_is_down_fails_the_job_and_says_why(
    tmp_path, broker_down, finished_jobs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        job = _job(tmp_path)
        jobs.enqueue(job, queues.IMPORT_JOB_RUN)
    job.refresh_from_db()
    assert job.status == ImportStatus.FAILED and job.finished_at is not None
    reason = "not queued, the task broker is unreachable: connection refused"
    assert job.error == reason and job.message == reason  # the import's page shows message
    assert jobs.send_error(job) == reason
    assert finished_jobs == [(ImportJob, job.pk, ImportStatus.FAILED)]


def test_a_failure_that_is_not_the_broker_is_no_send_error(tmp_path):
    job = _job(tmp_path, status=ImportStatus.RUNNING)
    assert jobs.fail(job, "the file is not JSON")
    assert jobs.send_error(job) == ""


def test_claim_takes_an_unfinished_job_and_counts_the_attempt(tmp_path):
    job = _job(tmp_path, message="left by an earlier run")
    claimed = jobs.claim(ImportJob, job.pk, message="")
    assert claimed is not None
    job.refresh_from_db()
    assert (job.status, job.attempt, job.message) == (ImportStatus.RUNNING, 1, "")
    assert job.started_at is not None
    assert jobs.claim(ImportJob, job.pk) is not None  # a redelivery takes it again
    job.refresh_from_db()
    assert job.attempt == 2


def test_claim_leaves_a_finished_or_missing_job_alone(tmp_path):
    done = _job(tmp_path, status=ImportStatus.DONE)
    assert jobs.claim(ImportJob, done.pk) is None
    assert jobs.claim(ImportJob, 999_999) is None
    done.refresh_from_db()
    assert done.attempt == 0


def test_a_job_finishes_once_and_tells_its_subscribers(tmp_path, finished_jobs):
    job = _job(tmp_path, status=ImportStatus.RUNNING)
    assert jobs.finish(job, ImportStatus.UNCHANGED, message="identical content")
    assert not jobs.finish(job, ImportStatus.DONE)  # the first outcome stays
    assert not jobs.fail(job, "too late")
    job.refresh_from_db()
    assert (job.status, job.message, job.error) == (ImportStatus.UNCHANGED, "identical content", "")
    assert finished_jobs == [(ImportJob, job.pk, ImportStatus.UNCHANGED)]


def test_finish_by_default_needs_a_running_job(tmp_path):
    queued = _job(tmp_path)
    assert not jobs.finish(queued)
    assert jobs.finish(queued, running_only=False)
    queued.refresh_from_db()
    assert queued.status == ImportStatus.DONE


def test_recover_hands_each_lost_row_to_its_kind_and_spares_held_ones(tmp_path, sent):
    lost = _job(tmp_path, status=ImportStatus.RUNNING)
    held = _job(tmp_path, status=ImportStatus.RUNNING)
    counts = jobs.recover(in_hand={(queues.IMPORT_JOB_RUN, (held.pk,))})
    assert counts["harness_app.ImportJob"] == 1
    lost.refresh_from_db()
    held.refresh_from_db()
    # The import's own rule: run again from its upload, once.
    assert lost.status == ImportStatus.QUEUED and lost.message.startswith("worker_lost: ")
    assert sent == [(queues.IMPORT_JOB_RUN, (lost.pk,))]
    assert held.status == ImportStatus.RUNNING


def test_recover_asks_the_workers_only_when_a_kind_needs_it(tmp_path):
    asked: list[int] = []

    def in_hand() -> frozenset[tuple[str, tuple[Any, ...]]]:
        asked.append(1)
        return frozenset()

    jobs.recover(in_hand=in_hand)
    assert len(asked) == 1  # once for every kind


def test_a_kind_that_cannot_be_recovered_does_not_stop_the_others(tmp_path, sent):
    job = _job(tmp_path, status=ImportStatus.RUNNING)

    @jobs.sweeps("tests.broken")
    def broken(in_hand: Any) -> int:
        raise RuntimeError("the database is not migrated")

    try:
        counts = jobs.recover(in_hand=frozenset())
    finally:
        del jobs._sweeps["tests.broken"]
    assert counts["tests.broken"] == 0 and counts["harness_app.ImportJob"] == 1
    job.refresh_from_db()
    assert job.status == ImportStatus.QUEUED


# Committed for real, as in production: the row is sent once the service's transaction
# commits, before the view answers.
@pytest.mark.django_db(transaction=True)
def test_an_upload_while_the_broker_is_down_answers_503_with_the_reason(
    researcher_api, data_dir, broker_down
):
    upload = SimpleUploadedFile("hotpot.json", json.dumps(HOTPOT).encode())
    response = researcher_api.post(
        "/api/benchmarks/import/", {"file": upload, "name": "hp"}, format="multipart"
    )
    assert response.status_code == 503
    body = response.json()
    job = ImportJob.objects.get()
    assert body["id"] == job.pk and body["status"] == ImportStatus.FAILED
    assert body["detail"] == "not queued, the task broker is unreachable: connection refused"


@pytest.mark.django_db(transaction=True)
def test_the_upload_form_says_the_import_could_not_start(researcher_client, data_dir, broker_down):
    upload = SimpleUploadedFile("hotpot.json", json.dumps(HOTPOT).encode())
    response = researcher_client.post(
        "/benchmarks/upload/", {"file": upload, "name": "hp", "split": "dev"}
    )
    assert response.status_code == 200
    assert "the import of &#x27;hp&#x27; could not start: not queued, the task broker" in (
        response.content.decode()
    )


def _harness_group_body(benchmark: Any, policy: Any) -> dict[str, Any]:
    from trajectories.services.harness_runs import harness_task_create

    task = harness_task_create(
        name="t", instruction="do it", files={"a.txt": "a"}, eval_command="true"
    )
    return {"task": task.pk, "kind": "command", "command": ["true"], "model": "m", "size": 2}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/api/ablation-matrices/", lambda b, p: {"benchmark": b.pk, "query_limit": 1}),
        (
            "/api/evaluation-runs/",
            lambda b, p: {"benchmarks": [b.pk], "policies": [p.pk], "query_limit": 1, "runs": 1},
        ),
        ("/api/harness-groups/", _harness_group_body),
    ],
)
def test_every_launch_endpoint_answers_503_with_the_reason_when_the_broker_is_down(
    url, body, researcher_api, demo_benchmark, baseline_policy, broker_down
):
    response = researcher_api.post(url, body(demo_benchmark, baseline_policy), format="json")
    assert response.status_code == 503, response.json()
    assert response.json()["detail"] == (
        "not queued, the task broker is unreachable: connection refused"
    )
    assert response.json()["id"]  # the row is kept, failed, for the caller to look at


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("url", "body", "said"),
    [
        (
            "/ablations/new/",
            lambda b, p: {
                "benchmark": b.pk,
                "policy": "baseline",
                "runs": 1,
                "query_limit": 1,
                "max_turns": 40,
                "retriever": "bm25",
                "conditions": ["full"],
            },
            "ablation matrix",
        ),
        (
            "/evaluations/new/",
            lambda b, p: {
                "benchmarks": [b.pk],
                "policies": [p.pk],
                "conditions": ["full"],
                "runs": 1,
                "query_limit": 1,
                "max_turns": 40,
            },
            "evaluation run",
        ),
    ],
)
def test_every_launch_form_says_the_broker_is_down(
    url, body, said, researcher_client, demo_benchmark, baseline_policy, broker_down
):
    response = researcher_client.post(url, body(demo_benchmark, baseline_policy))
    assert response.status_code == 200  # the form again, not a redirect to a "queued" page
    page = response.content.decode()
    assert "could not start: not queued, the task broker is unreachable: connection" in page
    assert said in page
