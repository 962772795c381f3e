"""The batch page's live block: pace and estimate, per-group state, the cancel confirmation,
and the last refresh of a finished batch that stops the polling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trajectories.models import BatchStatus, Episode, EpisodeStatus, RolloutBatch
from trajectories.selectors.batches import batch_pace, duration_text

LOGIN_QUERIES = 3  # session, user, the user's groups
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
COUNTS = {"failed": 1, "cancelled": 0, "running": 2}


def test_pace_is_episodes_per_minute_with_the_time_left_at_that_rate() -> None:
    batch = RolloutBatch(status=BatchStatus.RUNNING, episodes_total=48, episodes_completed=11)
    batch.episodes_failed = 1
    pace = batch_pace(batch=batch, first_started=T0, now=T0 + timedelta(minutes=4), counts=COUNTS)
    # 12 finished in 4 minutes: 3 a minute, so the 36 left take 12 minutes.
    assert pace == {
        "rate_per_min": 3.0,
        "eta": "12 min",
        "remaining": 36,
        "failed": 1,
        "cancelled": 0,
        "running": 2,
    }


def test_a_finished_batch_keeps_its_rate_until_it_finished_and_has_no_estimate() -> None:
    batch = RolloutBatch(
        status=BatchStatus.COMPLETED,
        episodes_total=10,
        episodes_completed=10,
        finished_at=T0 + timedelta(minutes=2),
    )
    pace = batch_pace(batch=batch, first_started=T0, now=T0 + timedelta(hours=5), counts=COUNTS)
    assert pace["rate_per_min"] == 5.0 and pace["eta"] is None


def test_no_rate_before_an_episode_finished() -> None:
    batch = RolloutBatch(status=BatchStatus.QUEUED, episodes_total=4)
    pace = batch_pace(batch=batch, first_started=None, now=T0, counts=COUNTS)
    assert pace["rate_per_min"] is None and pace["eta"] is None and pace["remaining"] == 4


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.2, "1 s"), (45, "45 s"), (120, "2 min"), (200, "3 min 20 s"), (7500, "2 h 5 min")],
)
def test_durations_read_as_wall_clock_estimates(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


@pytest.mark.django_db
def test_a_running_batch_polls_its_whole_live_block(researcher_client, ran_batch) -> None:
    RolloutBatch.objects.filter(pk=ran_batch.pk).update(
        status=BatchStatus.RUNNING, episodes_completed=3
    )
    last = ran_batch.episodes.order_by("group", "sample_index").last()
    Episode.objects.filter(pk=last.pk).update(status=EpisodeStatus.RUNNING)
    page = researcher_client.get(f"/batches/{ran_batch.pk}/").content.decode()
    assert (
        f'<div id="batch-live" data-status="running" hx-get="/batches/{ran_batch.pk}/progress/" '
        'hx-trigger="every 2s" hx-swap="outerHTML">'
    ) in page
    assert "episodes/min · ETA" in page and "(1 left) · 1 running" in page
    assert f'data-confirm="Cancel batch {ran_batch.pk}? Its 1 unfinished episodes' in page
    assert "js/batch.js" in page
    # The fragment is the same block: metrics and groups refresh with the progress line.
    fragment = researcher_client.get(f"/batches/{ran_batch.pk}/progress/").content.decode()
    assert fragment.lstrip().startswith('<div id="batch-live" data-status="running" hx-get=')
    assert '<td class="num" data-metric="n">3</td>' in fragment
    assert fragment.count('status-completed">done<') == 1
    assert fragment.count('status-running">running<') == 1
    assert "Cancel batch" in fragment


@pytest.mark.django_db
def test_a_finished_batch_answers_its_final_figures_and_stops_polling(
    researcher_client, ran_batch, django_assert_num_queries
) -> None:
    # batch, means and pace, termination reasons, group count, groups page
    with django_assert_num_queries(LOGIN_QUERIES + 5):
        fragment = researcher_client.get(f"/batches/{ran_batch.pk}/progress/").content.decode()
    assert 'data-status="completed">' in fragment and "hx-trigger" not in fragment
    assert '<td class="num" data-metric="n">4</td>' in fragment
    assert fragment.count('status-completed">done<') == 2
    assert fragment.count('<td class="num">2/2</td>') == 2
    assert "Cancel batch" not in fragment and "ETA" not in fragment
    assert "Ran at <strong>" in fragment and "<strong>0</strong> failed" in fragment


@pytest.mark.django_db
def test_failures_are_counted_live_and_linked(researcher_client, ran_batch) -> None:
    ran_batch.episodes.filter(pk=ran_batch.episodes.first().pk).update(status=EpisodeStatus.FAILED)
    fragment = researcher_client.get(f"/batches/{ran_batch.pk}/progress/").content.decode()
    assert '<span class="status-bad"><strong>1</strong> failed</span>' in fragment
    assert f'href="/episodes/?batch={ran_batch.pk}&amp;status=failed">see the failures' in fragment
