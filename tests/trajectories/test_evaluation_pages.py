"""The evaluation-run pages: launch form, list, the run's page with its table, comparison
and transfer table (CSV and chart data), live progress, cancel; researchers only."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from harness_app.models import PolicyConfig, PolicyKind
from trajectories.models import Episode, EpisodeStatus, EvaluationRun, EvaluationStatus
from trajectories.services.evaluations import evaluation_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def second_policy(db: None) -> PolicyConfig:
    return PolicyConfig.objects.create(name="baseline-b", kind=PolicyKind.BASELINE)


@pytest.fixture
def scored(demo_benchmark, baseline_policy, second_policy, django_capture_on_commit_callbacks):
    """Two configurations x 3 runs x 2 queries; B scores 0.25 above A on every query."""
    with django_capture_on_commit_callbacks():
        evaluation = evaluation_create(
            benchmarks=[demo_benchmark], policies=[baseline_policy, second_policy], query_limit=2
        )
    episodes = Episode.objects.filter(batch__evaluation=evaluation)
    episodes.filter(batch__policy=baseline_policy).update(
        status=EpisodeStatus.COMPLETED, curated_recall=0.5, reward=0.5, turns=3
    )
    episodes.filter(batch__policy=second_policy).update(
        status=EpisodeStatus.COMPLETED, curated_recall=0.75, reward=0.5, turns=3
    )
    return evaluation


def _script_json(page: str, element_id: str) -> Any:
    found = re.search(rf'id="{element_id}" type="application/json">(.*?)</script>', page)
    assert found, f"no {element_id} on the page"
    return json.loads(found.group(1))


def test_the_launch_form_creates_a_run_and_shows_it(
    researcher_client,
    demo_benchmark,
    baseline_policy,
    second_policy,
    django_capture_on_commit_callbacks,
):
    assert "Launch an evaluation run" in researcher_client.get("/evaluations/new/").content.decode()
    body = {
        "benchmarks": [demo_benchmark.pk],
        "policies": [baseline_policy.pk, second_policy.pk],
        "conditions": ["minus_verify", "full"],
        "runs": 3,
        "query_limit": 1,
        "max_turns": 40,
    }
    with django_capture_on_commit_callbacks():
        response = researcher_client.post("/evaluations/new/", body, follow=True)
    evaluation = EvaluationRun.objects.get()
    assert evaluation.conditions == ["full", "minus_verification"]  # the reference's order
    assert evaluation.batches.count() == 2 * 2 * 3
    page = response.content.decode()
    assert f"Evaluation run {evaluation.pk} queued: 12 batches." in page
    assert 'hx-get="/evaluations/' in page  # the progress polls while the run goes
    listing = researcher_client.get("/evaluations/").content.decode()
    assert f'href="/evaluations/{evaluation.pk}/"' in listing and "0 / 12" in listing


def test_a_refused_launch_shows_the_error_on_its_field(
    researcher_client, demo_benchmark, baseline_policy
):
    body = {"benchmarks": [demo_benchmark.pk], "policies": [baseline_policy.pk],
            "conditions": ["full"], "runs": 50, "max_turns": 40}  # fmt: skip
    page = researcher_client.post("/evaluations/new/", body).content.decode()
    assert 'id="runs-error">runs must be between 1 and 20, got 50' in page
    assert not EvaluationRun.objects.exists()


def test_the_page_shows_the_table_the_comparison_and_the_transfer_table(
    researcher_client, scored, baseline_policy, second_policy
):
    a, b = f"{baseline_policy.pk}:full", f"{second_policy.pk}:full"
    page = researcher_client.get(
        f"/evaluations/{scored.pk}/", {"a": a, "b": b, "metric": "reward"}
    ).content.decode()
    rows = re.findall(r'<tr data-config="([^"]+)"><td>demo</td><td class="mono">([^<]+)</td>'
                      r'<td class="num">(\d+)</td><td class="num">(\d+)</td>', page)  # fmt: skip
    assert rows == [(a, "baseline · full", "3", "2"), (b, "baseline-b · full", "3", "2")]
    assert "0.750 ± 0.000" in page
    result = re.search(r'<p id="compare-result">(.*?)</p>', page, re.S)
    assert result and "<strong>0.2500</strong>, 95% CI [0.2500, 0.2500] over 2 paired queries" in (
        result.group(1)
    )
    chart = _script_json(page, "transfer-chart-data")
    assert chart["groups"] == ["demo"]
    assert [s["mean"] for s in chart["charts"][0]["series"]] == [[0.5], [0.5]]  # reward
    assert f'href="/evaluations/{scored.pk}/transfer.csv?metric=reward"' in page
    csv_response = researcher_client.get(f"/evaluations/{scored.pk}/transfer.csv")
    rows = list(csv.reader(io.StringIO(csv_response.content.decode())))
    assert rows[1] == ["demo", "0.5000", "0.0000", "0.7500", "0.0000"]
    bad = researcher_client.get(f"/evaluations/{scored.pk}/", {"a": a, "b": "9:full"})
    assert "is not a configuration of this run" in bad.content.decode()


def test_progress_polls_until_the_run_finishes_then_reloads(researcher_client, scored):
    fragment = researcher_client.get(f"/evaluations/{scored.pk}/progress/", HTTP_HX_REQUEST="true")
    assert "hx-trigger" in fragment.content.decode() and "HX-Refresh" not in fragment
    response = researcher_client.post(f"/evaluations/{scored.pk}/cancel/", follow=True)
    assert "cancelled" in response.content.decode()
    scored.refresh_from_db()
    assert scored.status == EvaluationStatus.CANCELLED
    fragment = researcher_client.get(f"/evaluations/{scored.pk}/progress/", HTTP_HX_REQUEST="true")
    assert fragment["HX-Refresh"] == "true" and "hx-trigger" not in fragment.content.decode()


def test_annotators_are_refused(annotator_client, scored):
    for path in ("/evaluations/", "/evaluations/new/", f"/evaluations/{scored.pk}/"):
        response = annotator_client.get(path)
        assert response.status_code == 403
        assert "researcher" in response.content.decode()
    assert annotator_client.post(f"/evaluations/{scored.pk}/cancel/").status_code == 403
    scored.refresh_from_db()
    assert scored.status == EvaluationStatus.RUNNING


def _queries_for(client: Any, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured)


def test_query_counts_do_not_grow_with_runs_or_batches(
    researcher_client, researcher_api, demo_benchmark, baseline_policy, second_policy,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    def create(runs: int) -> EvaluationRun:
        with django_capture_on_commit_callbacks():
            return evaluation_create(
                benchmarks=[demo_benchmark],
                policies=[baseline_policy, second_policy],
                runs=runs,
                query_limit=2,
            )

    small = create(1)
    pages = ("/evaluations/", f"/evaluations/{small.pk}/", "/api/evaluation-runs/")
    before = [_queries_for(researcher_client, p) for p in pages[:2]]
    before.append(_queries_for(researcher_api, pages[2]))
    large = create(3)
    create(2)
    after = [_queries_for(researcher_client, pages[0]), 0, _queries_for(researcher_api, pages[2])]
    after[1] = _queries_for(researcher_client, f"/evaluations/{large.pk}/")
    assert after == before
