"""A batch launched while the task broker is down: the form, the API and `run_batch` each
say so clearly (a form error, a 503 with the reason, an `error:` line), and the batch is
kept, failed with the reason, its episodes pending. With the broker back, re-sending it
(the page's button, the API, `run_batch --resend`) runs every episode once."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from celery import current_app
from django.core.management import call_command

from harness_app import jobs, queues
from tests.workers import start_worker, wait_until
from trajectories.models import BatchStatus, Episode, EpisodeStatus, RolloutBatch

pytestmark = pytest.mark.django_db(transaction=True)

CLOSED_PORT = "redis://127.0.0.1:1/0"  # nothing listens there: connection refused


def _broker_at(url: str) -> None:
    """Send this process's tasks to `url`: new pools, so no pooled connection is reused
    (the old pools are left to whoever holds them)."""
    current_app._pool = None
    current_app.amqp._producer_pool = None
    current_app.conf.broker_write_url = url


@pytest.fixture
def broker_down() -> Iterator[Any]:
    """The broker is down until the test calls the fixture's value to bring it back."""
    original = current_app.conf.broker_write_url
    _broker_at(CLOSED_PORT)
    yield lambda: _broker_at(original)
    _broker_at(original)


def _launch_by_form(client: Any, benchmark: Any, policy: Any) -> tuple[RolloutBatch, str]:
    form = {
        "benchmark": benchmark.pk,
        "policy": policy.pk,
        "samples_per_query": 2,
        "query_limit": 1,
        "max_turns": 8,
        "termination_policy": "max_turns",
    }
    response = client.post("/batches/new/", form)
    assert response.status_code == 200  # the form again, with the error, not a redirect
    return RolloutBatch.objects.latest("pk"), response.content.decode()


def _launch_by_api(api: Any, benchmark: Any, policy: Any) -> tuple[RolloutBatch, Any]:
    body = {"benchmark": benchmark.pk, "policy": policy.pk, "query_limit": 1}
    body["samples_per_query"] = 2
    response = api.post("/api/batches/", body, format="json")
    return RolloutBatch.objects.latest("pk"), response


def _launch_by_command(benchmark: Any, policy: Any) -> tuple[RolloutBatch, str]:
    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command(
            "run_batch",
            "--benchmark",
            benchmark.name,
            "--policy",
            policy.name,
            "--limit",
            "1",
            "--samples",
            "2",
            stderr=err,
        )
    assert exited.value.code == 1
    return RolloutBatch.objects.latest("pk"), err.getvalue()


def _not_sent(batch: RolloutBatch) -> None:
    batch.refresh_from_db()
    assert batch.status == BatchStatus.FAILED
    assert batch.error.startswith(jobs.NOT_QUEUED + ": ")
    assert "Connection refused" in batch.error or "connection refused" in batch.error
    statuses = set(Episode.objects.filter(batch=batch).values_list("status", flat=True))
    assert statuses == {EpisodeStatus.PENDING}


def test_a_batch_launched_while_the_broker_is_down_says_so_and_can_be_resent(
    tmp_path,
    broker_down,
    researcher_client,
    researcher_api,
    demo_benchmark,
    baseline_policy,
):
    by_form, page = _launch_by_form(researcher_client, demo_benchmark, baseline_policy)
    _not_sent(by_form)
    assert f"batch {by_form.pk} was created but not sent: not queued, the task broker" in page
    assert "can be re-sent from its page" in page

    by_api, response = _launch_by_api(researcher_api, demo_benchmark, baseline_policy)
    _not_sent(by_api)
    assert response.status_code == 503
    assert response.json()["id"] == by_api.pk
    assert response.json()["detail"].startswith(jobs.NOT_QUEUED)

    by_command, err = _launch_by_command(demo_benchmark, baseline_policy)
    _not_sent(by_command)
    assert f"error: batch {by_command.pk} was not sent: not queued, the task broker" in err
    assert f"run_batch --resend {by_command.pk}" in err
    assert "Traceback" not in err

    # Its page says why and offers the button; re-sending while still down says so again.
    detail = researcher_client.get(f"/batches/{by_form.pk}/").content.decode()
    assert "Its episodes were not sent: not queued, the task broker" in detail
    assert f'action="/batches/{by_form.pk}/resend/"' in detail
    still_down = researcher_api.post(f"/api/batches/{by_api.pk}/resend/")
    assert still_down.status_code == 503 and still_down.json()["detail"].startswith(jobs.NOT_QUEUED)
    _not_sent(by_api)

    broker_down()  # the broker is back
    worker = start_worker(tmp_path, queues="rollouts")
    try:
        # As if one task had got through before the broker failed: re-sending sends that
        # episode again, and it still runs once.
        early = Episode.objects.filter(batch=by_form).order_by("pk").first()
        assert early is not None
        queues.enqueue(queues.EPISODE_RUN, early.pk)

        page_answer = researcher_client.post(f"/batches/{by_form.pk}/resend/", follow=True)
        assert f"Batch {by_form.pk} re-sent: 2 pending episodes queued." in (
            page_answer.content.decode()
        )
        api_answer = researcher_api.post(f"/api/batches/{by_api.pk}/resend/")
        assert api_answer.status_code == 202, api_answer.json()
        assert api_answer.json()["status"] == BatchStatus.QUEUED
        call_command("run_batch", "--resend", str(by_command.pk), stderr=io.StringIO())

        batches = [by_form, by_api, by_command]
        wait_until(
            lambda: all(_finished(b) for b in batches),
            timeout=300,
            what=f"the re-sent batches to finish\n{worker.log()[-3000:]}",
        )
    finally:
        worker.stop()
    for batch in batches:
        batch.refresh_from_db()
        assert (batch.status, batch.error) == (BatchStatus.COMPLETED, "")
        assert (batch.episodes_completed, batch.episodes_failed) == (2, 0)
        attempts = Episode.objects.filter(batch=batch).values_list("attempts", flat=True)
        assert list(attempts) == [1, 1]  # every episode ran once
    # A batch that was sent is not sent again.
    refused = researcher_api.post(f"/api/batches/{by_api.pk}/resend/")
    assert refused.status_code == 409
    assert "only a batch whose sends failed can be re-sent" in refused.json()["detail"]


def _finished(batch: RolloutBatch) -> bool:
    batch.refresh_from_db()
    return batch.status in batch.FINISHED
