"""A failed or cancelled episode has no metrics: its recalls, tool diversity and reward are
stored as null, every page and the API show "—", the min/max filters leave it out unless the
status filter asks for it, and the means are over completed episodes."""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps

from tests import factories
from trajectories.models import Episode, EpisodeStatus
from trajectories.selectors import evaluations as evaluation_selectors
from trajectories.selectors.batches import batch_metrics, batch_summary
from trajectories.selectors.dashboard import condition_rows
from trajectories.selectors.episode_list import episode_list_queryset
from trajectories.services.evaluations import evaluation_create

pytestmark = pytest.mark.django_db

SCORES = ("curated_recall", "trajectory_recall", "final_answer_recall", "tool_diversity", "reward")


@pytest.fixture
def failed(demo_benchmark, unreachable_llm_policy, settings) -> Episode:
    """An episode of the first demo query whose model server could not be reached."""
    settings.VLLM_RETRIES = 1
    batch = factories.batch_played(demo_benchmark, unreachable_llm_policy, query_limit=1)
    return batch.episodes.get()


@pytest.fixture
def completed(demo_benchmark, baseline_policy) -> Episode:
    """The baseline on the same query: a completed episode to stand beside the failed one."""
    batch = factories.batch_played(demo_benchmark, baseline_policy, query_limit=1)
    return batch.episodes.get()


def test_a_failed_episode_stores_no_scores_but_keeps_its_counts(failed) -> None:
    assert failed.status == EpisodeStatus.FAILED
    assert {name: getattr(failed, name) for name in SCORES} == dict.fromkeys(SCORES)
    assert failed.metrics == {} and failed.reward_components == {}
    assert failed.turn_rows.exists()  # what it did before failing is still there


def test_pages_show_a_dash_for_the_failed_episode_and_figures_for_the_other(
    researcher_client, failed, completed
) -> None:
    listed = researcher_client.get("/episodes/").content.decode()
    row = re.search(rf'<tr data-href="/episodes/{failed.pk}/.*?</tr>', listed, re.S).group(0)
    assert "0.000" not in row
    assert row.count(">—</td>") >= 4  # three recalls and the reward
    viewer = researcher_client.get(f"/episodes/{failed.pk}/").content.decode()
    metrics = re.search(r'aria-label="Metrics">.*?</table>', viewer, re.S).group(0)
    assert "0.000" not in metrics and metrics.count("—") == 7
    group = researcher_client.get(f"/groups/{failed.group_id}/").content.decode()
    assert "0.000" not in group
    compare = researcher_client.get(f"/compare/?a={completed.pk}&b={failed.pk}").content.decode()
    recall_row = re.search(r"<th>Curated recall</th>(.*?)</tr>", compare, re.S).group(1)
    assert recall_row.endswith("<td>—</td>") and f"{completed.curated_recall:.3f}" in recall_row


def test_the_api_answers_null_for_the_failed_episode(annotator_api, failed) -> None:
    answer = annotator_api.get("/api/episodes/?status=failed").json()["results"]
    assert [row["id"] for row in answer] == [failed.pk]
    assert {name: answer[0][name] for name in SCORES} == dict.fromkeys(SCORES)


def test_metric_filters_skip_failed_episodes_unless_the_status_filter_asks(
    failed, completed
) -> None:
    def ids(**filters: object) -> set[int]:
        return set(episode_list_queryset(filters=filters).values_list("pk", flat=True))

    assert ids(curated_recall_max=0.5) <= {completed.pk}
    assert ids(reward_max=10) == {completed.pk}
    assert ids(turns_max=100) == {completed.pk}  # a count, but still a metric filter
    assert ids(status="failed") == {failed.pk}
    assert ids(status="failed", turns_max=100) == {failed.pk}  # asked for: counts apply
    assert ids(status="failed", curated_recall_max=1) == set()  # it has no recall at all


def test_means_are_over_completed_episodes_even_when_a_failed_one_holds_numbers(
    ran_batch, demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    """An episode failed before the rule stored its zeros; no mean may count them."""
    factories.synthetic_episodes(
        ran_batch,
        1,
        status=EpisodeStatus.FAILED,
        termination_reason="model_timeout",
        **dict.fromkeys(SCORES, 0.0),
        turns=1,
    )
    completed = ran_batch.episodes.filter(status=EpisodeStatus.COMPLETED)
    expected = sum(e.curated_recall for e in completed) / completed.count()
    [row] = condition_rows()
    assert (row["n"], row["errors"]) == (4, 1)
    assert row["mean_curated_recall"] == pytest.approx(expected, abs=1e-3)
    assert batch_metrics(batch=ran_batch)["means"]["mean_curated_recall"] == pytest.approx(
        expected, abs=1e-3
    )
    assert batch_summary(batch=ran_batch)["metrics"]["curated_recall"] == pytest.approx(
        expected, abs=1e-3
    )

    with django_capture_on_commit_callbacks():
        evaluation = evaluation_create(
            benchmarks=[demo_benchmark], policies=[baseline_policy], runs=1, query_limit=2
        )
    good, bad = evaluation.batches.get().episodes.order_by("pk")
    Episode.objects.filter(pk=good.pk).update(status=EpisodeStatus.COMPLETED, curated_recall=0.8)
    Episode.objects.filter(pk=bad.pk).update(status=EpisodeStatus.FAILED, curated_recall=0.0)
    [table_row] = evaluation_selectors.evaluation_table(evaluation=evaluation)["rows"]
    assert table_row["values"]["curated_recall"]["mean"] == pytest.approx(0.8)


def test_the_migration_nulls_the_scores_of_finished_unscored_episodes(ran_batch) -> None:
    kept = ran_batch.episodes.order_by("pk").first()
    [failed, cancelled] = factories.synthetic_episodes(
        ran_batch, 2, status=EpisodeStatus.FAILED, metrics={"curated_recall": 0.0}, reward=-0.2
    )
    Episode.objects.filter(pk=cancelled.pk).update(status=EpisodeStatus.CANCELLED)
    migration = importlib.import_module(
        "trajectories.migrations.0016_failed_metrics_null_and_condition_names"
    )
    migration.unscored_metrics_null(apps, None)
    for episode in (failed, cancelled):
        episode.refresh_from_db()
        assert {name: getattr(episode, name) for name in SCORES} == dict.fromkeys(SCORES)
        assert episode.metrics == {} and episode.turns == 5  # counts are kept
    kept_before = kept.curated_recall
    kept.refresh_from_db()
    assert kept.curated_recall == kept_before is not None
