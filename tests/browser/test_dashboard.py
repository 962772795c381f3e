"""A real Chromium draws the dashboard's recall charts: one bar per experiment and ablation,
each with its error bar and its n; with 20 experiments and one very long label they keep
their height, the long label going to the hover."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import TestCase

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.users import user_ensure
from tests import factories
from tests.chromium import login
from trajectories.models import EpisodeStatus
from trajectories.services.rollouts import batch_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-browser-123"


def test_the_recall_charts_have_error_bars_and_n(live_server: Any, page: Any) -> None:
    benchmark, policy = factories.demo_benchmark(), factories.baseline_policy()
    factories.batch_played(benchmark, policy, query_limit=2, samples_per_query=2)
    factories.batch_played(
        benchmark, policy, query_limit=2, samples_per_query=3, max_turns=3,
        termination_policy="last_tool",
    )  # fmt: skip
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    page.goto(f"{live_server.url}/")
    chart = page.locator("#chart-curated_recall")
    chart.locator(".main-svg").first.wait_for(timeout=5000)
    # Two experiments (40-turn max_turns, 3-turn last_tool) of one ablation: two bars.
    assert chart.locator(".barlayer .point").count() == 2
    assert chart.locator(".errorbar").count() == 2
    assert sorted(chart.locator(".barlayer text").all_text_contents()) == ["n=4", "n=6"]
    assert page.locator(".ablation-table tbody tr").count() == 2
    assert page.console_watcher.errors == []


LONG_POLICY = (
    "qwen2.5-7b-instruct teacher on the hosted API with json_schema tool calls, temperature"
    " 0.7 and the long system prompt of the 2026 sweep"
)


def _experiments(benchmark: Any, count: int) -> None:
    """`count` experiments of the baseline (one max_turns each, one completed episode), and
    one more whose only batch failed under a policy with a very long name."""
    baseline = factories.baseline_policy()
    for i in range(count - 1):
        batch = _batch_created(benchmark, baseline, max_turns=3 + i)
        batch.episodes.update(
            status=EpisodeStatus.COMPLETED, curated_recall=0.1 + i / 40,
            final_answer_recall=0.5, trajectory_recall=0.7, reward=0.5, turns=3,
        )  # fmt: skip
    long_named = PolicyConfig.objects.create(name=LONG_POLICY, kind=PolicyKind.BASELINE)
    failed = _batch_created(benchmark, long_named, max_turns=40)
    failed.episodes.update(status=EpisodeStatus.FAILED)


def _batch_created(benchmark: Any, policy: Any, **settings: Any) -> Any:
    with TestCase.captureOnCommitCallbacks():  # nothing is queued
        return batch_create(benchmark=benchmark, policy=policy, query_limit=1, **settings)


def _plot_area_height(page: Any, chart_id: str) -> float:
    """The height of the chart's plot area (Plotly's drag rectangle) once it has settled:
    a chart may redraw itself taller just after its first draw, so this waits up to 3 s for
    200 px before it answers."""
    return float(
        page.evaluate(
            """async id => {
                const height = () => document.querySelector('#' + id + ' .nsewdrag')
                    ?.getBoundingClientRect().height || 0;
                for (let waited = 0; height() < 200 && waited < 3000; waited += 100) {
                    await new Promise(resolve => setTimeout(resolve, 100));
                }
                return height();
            }""",
            chart_id,
        )
    )


def test_the_charts_keep_their_height_with_20_experiments_and_a_long_label(
    live_server: Any, page: Any
) -> None:
    _experiments(factories.demo_benchmark(), 20)
    user_ensure(username="rita", password=PASSWORD, role=Role.RESEARCHER)
    login(page, live_server.url, "rita", PASSWORD)
    for width in (1400, 900):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/")
        for metric in ("curated_recall", "final_answer_recall", "trajectory_recall"):
            chart = page.locator(f"#chart-{metric}")
            chart.locator(".main-svg").first.wait_for(timeout=10_000)
            assert _plot_area_height(page, f"chart-{metric}") >= 200, (metric, width)
            # The ticks are short; the full label is one hover away.
            ticks = chart.locator(".xtick text").all_text_contents()
            assert len(ticks) == 20 and max(len(t) for t in ticks) <= 32, ticks
            assert not any(LONG_POLICY in t for t in ticks)
        chart = page.locator("#chart-curated_recall")
        chart.scroll_into_view_if_needed()
        bar = chart.locator(".barlayer .point path").first.bounding_box()
        assert bar is not None
        page.mouse.move(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2)
        hover = chart.locator(".hoverlayer .hovertext").first
        hover.wait_for(timeout=5000)
        assert "demo · baseline · max_turns ≤ 10 turns · first 1 queries" in hover.text_content()
    assert page.console_watcher.errors == []
