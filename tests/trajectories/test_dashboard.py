"""The dashboard's experiment comparison: batches with different conversation settings stay
apart, every bar carries its spread and n, and cancelled episodes are counted."""

from __future__ import annotations

import json
import re

import pytest

from trajectories.models import EpisodeStatus
from trajectories.selectors.dashboard import condition_rows, dashboard_charts
from trajectories.services.rollouts import batch_cancel, batch_create

pytestmark = pytest.mark.django_db

LONG = "max_turns ≤ 40 turns · first 2 queries"
SHORT = "last_tool ≤ 3 turns · first 2 queries"


def _chart_data(page: str) -> dict:
    found = re.search(r'id="chart-data" type="application/json">(.*?)</script>', page)
    return json.loads(found.group(1))


def test_batches_with_other_conversation_settings_are_other_rows(
    researcher_client, ran_batch, batch_of
) -> None:
    batch_of(query_limit=2, samples_per_query=2, max_turns=3, termination_policy="last_tool")
    rows = condition_rows()
    assert [(r["ablation"], r["settings"], r["n"]) for r in rows] == [
        ("full", SHORT, 4),
        ("full", LONG, 4),
    ]
    page = researcher_client.get("/").content.decode()
    assert f'<span class="muted small">{LONG}</span>' in page
    assert f'<span class="muted small">{SHORT}</span>' in page
    charts = _chart_data(page)
    assert charts["conditions"] == [f"demo · baseline · {SHORT}", f"demo · baseline · {LONG}"]
    assert charts["condition_parts"] == [["demo", "baseline", SHORT], ["demo", "baseline", LONG]]


def test_every_bar_has_its_standard_deviation_and_n(ran_batch) -> None:
    charts = dashboard_charts(condition_rows())
    [series] = charts["metrics"]["curated_recall"]
    recalls = [e.curated_recall for e in ran_batch.episodes.all()]
    mean = sum(recalls) / 4
    sd = (sum((r - mean) ** 2 for r in recalls) / 4) ** 0.5  # population: defined for n = 1
    assert series["n"] == [4]
    assert series["y"][0] == pytest.approx(mean, abs=1e-4)
    assert series["std"][0] == pytest.approx(sd, abs=1e-4)


def test_reward_weights_that_differ_from_the_default_make_another_experiment(
    ran_batch, batch_of
) -> None:
    batch_of(query_limit=2, samples_per_query=2, reward_weights={"answer_hit": 2.0})
    labels = [r["settings"] for r in condition_rows()]
    assert labels == [LONG, f"{LONG} · reward answer_hit=2.0"]


def test_failed_and_cancelled_episodes_are_counted_apart_and_out_of_the_means(
    researcher_client, ran_batch, demo_benchmark, baseline_policy
) -> None:
    ran_batch.episodes.filter(pk=ran_batch.episodes.first().pk).update(status=EpisodeStatus.FAILED)
    queued = batch_create(
        benchmark=demo_benchmark, policy=baseline_policy, query_limit=2, samples_per_query=2
    )
    batch_cancel(batch=queued)
    [row] = condition_rows()  # same experiment as ran_batch
    assert (row["n"], row["errors"], row["cancelled"]) == (3, 1, 4)
    page = researcher_client.get("/").content.decode()
    assert '<th class="num">Errors</th><th class="num">Cancelled</th>' in page
    assert '<td class="num status-bad">1</td>\n        <td class="num">4</td>' in page
