"""Researcher pages: the episode list and its filters, dashboard, groups, comparisons, batches."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs

import pytest

from harness_app.models import PolicyConfig, Query
from trajectories.models import (
    AnnotationStatus,
    BatchStatus,
    Episode,
    EpisodeStatus,
    RolloutBatch,
)
from trajectories.selectors.batches import group_view

pytestmark = pytest.mark.django_db

LOGIN_QUERIES = 3  # session, user, the user's groups


def _episode_ids(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'href="/episodes/(\d+)/(?:\?from=[^"]*)?">#', page)]


def _bulk_episodes(batch: RolloutBatch, count: int) -> None:
    """Extra finished episodes with spread-out metrics, in the batch's first group."""
    group = batch.groups.order_by("pk").first()
    Episode.objects.bulk_create(
        Episode(
            group=group,
            batch=batch,
            query_id=group.query_id,
            sample_index=100 + i,
            status=EpisodeStatus.COMPLETED,
            termination_reason="max_turns",
            curated_recall=i / count,
            final_answer_recall=i / count,
            trajectory_recall=1.0,
            reward=i / count,
            turns=i,
            tool_diversity=i % 6,
        )
        for i in range(count)
    )


# --- the episode list ------------------------------------------------------------------------


def test_list_shows_episodes_with_their_metrics(researcher_client, ran_batch) -> None:
    page = researcher_client.get("/episodes/").content.decode()
    assert sorted(_episode_ids(page)) == sorted(ran_batch.episodes.values_list("pk", flat=True))
    first = ran_batch.episodes.select_related("query").first()
    assert first.query.text[:40] in page
    assert "4 episodes" in page


@pytest.mark.parametrize("count", [1, 60])
def test_list_costs_the_same_queries_for_any_number_of_rows(
    researcher_client, ran_batch, django_assert_num_queries, count: int
) -> None:
    _bulk_episodes(ran_batch, count)
    # benchmark and policy choices, the count, the page's ids, its rows, saved filters
    with django_assert_num_queries(LOGIN_QUERIES + 6):
        response = researcher_client.get(
            "/episodes/", {"sort": "reward_desc", "status": "completed"}
        )
    assert len(_episode_ids(response.content.decode())) == min(count + 4, 50)


def test_filters_narrow_the_list(researcher_client, ran_batch) -> None:
    _bulk_episodes(ran_batch, 20)
    page = researcher_client.get(
        "/episodes/",
        {
            "curated_recall_min": "0.5",
            "curated_recall_max": "0.8",
            "turns_min": "11",
            "batch": ran_batch.pk,
        },
    ).content.decode()
    expected = Episode.objects.filter(
        batch=ran_batch, curated_recall__gte=0.5, curated_recall__lte=0.8, turns__gte=11
    )
    assert sorted(_episode_ids(page)) == sorted(expected.values_list("pk", flat=True))
    assert expected.exists()


def test_text_search_status_and_reason_filters(researcher_client, ran_batch) -> None:
    query = ran_batch.episodes.select_related("query").first().query
    word = query.text.split()[-1].strip("?")
    page = researcher_client.get("/episodes/", {"q": word.upper()}).content.decode()
    assert sorted(_episode_ids(page)) == sorted(
        Episode.objects.filter(query__text__icontains=word).values_list("pk", flat=True)
    )
    reason = ran_batch.episodes.first().termination_reason
    page = researcher_client.get(
        "/episodes/", {"status": "completed", "termination_reason": reason}
    ).content.decode()
    assert len(_episode_ids(page)) == ran_batch.episodes.filter(termination_reason=reason).count()
    failed = researcher_client.get("/episodes/", {"status": "failed"}).content.decode()
    assert _episode_ids(failed) == [] and "No episode matches" in failed


def test_policy_benchmark_and_annotation_filters(researcher_client, ran_batch) -> None:
    other = PolicyConfig.objects.create(name="other", kind="baseline")
    page = researcher_client.get("/episodes/", {"policy": other.pk}).content.decode()
    assert _episode_ids(page) == []
    page = researcher_client.get(
        "/episodes/", {"policy": ran_batch.policy_id, "benchmark": ran_batch.benchmark_id}
    ).content.decode()
    assert len(_episode_ids(page)) == 4
    flagged = ran_batch.episodes.first()
    Episode.objects.filter(pk=flagged.pk).update(annotation_status=AnnotationStatus.FLAGGED)
    page = researcher_client.get("/episodes/", {"annotation_status": "flagged"}).content.decode()
    assert _episode_ids(page) == [flagged.pk]


def test_sorting_orders_rows_and_puts_unfinished_last(researcher_client, ran_batch) -> None:
    _bulk_episodes(ran_batch, 10)
    Episode.objects.filter(pk=ran_batch.episodes.first().pk).update(reward=None)
    page = researcher_client.get("/episodes/", {"sort": "reward_desc"}).content.decode()
    ids = _episode_ids(page)
    rewards = dict(Episode.objects.values_list("pk", "reward"))
    finished = [rewards[i] for i in ids if rewards[i] is not None]
    assert finished == sorted(finished, reverse=True)
    assert rewards[ids[-1]] is None
    page = researcher_client.get("/episodes/", {"sort": "reward_asc"}).content.decode()
    ascending = [rewards[i] for i in _episode_ids(page) if rewards[i] is not None]
    assert ascending == sorted(ascending) and rewards[_episode_ids(page)[-1]] is None


def test_pagination_keeps_the_filters(researcher_client, ran_batch) -> None:
    _bulk_episodes(ran_batch, 70)
    page = researcher_client.get(
        "/episodes/", {"status": "completed", "sort": "turns_asc"}
    ).content.decode()
    next_link = re.search(r'href="\?([^"]+)" rel="next"', page)
    assert next_link
    params = parse_qs(next_link.group(1).replace("&amp;", "&"))
    assert params == {"status": ["completed"], "sort": ["turns_asc"], "page": ["2"]}
    second = researcher_client.get("/episodes/?" + next_link.group(1).replace("&amp;", "&"))
    assert len(_episode_ids(second.content.decode())) == 74 - 50


def test_bad_filter_values_are_reported_and_ignored(researcher_client, ran_batch) -> None:
    response = researcher_client.get(
        "/episodes/", {"curated_recall_min": "lots", "status": "completed"}
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "curated_recall_min" in page and "(ignored)" in page
    assert len(_episode_ids(page)) == 4


def test_filter_form_keeps_its_values_for_the_permalink(researcher_client, ran_batch) -> None:
    page = researcher_client.get(
        "/episodes/", {"q": "river", "curated_recall_min": "0.25", "sort": "reward_desc"}
    ).content.decode()
    assert 'name="q" value="river"' in page
    assert 'name="curated_recall_min" value="0.25"' in page
    assert '<option value="reward_desc" selected>' in page
    assert 'id="copy-link"' in page


def test_query_text_in_the_list_is_escaped(researcher_client, ran_batch, payloads) -> None:
    SCRIPT = payloads.script
    Query.objects.filter(pk=ran_batch.episodes.first().query_id).update(text=f"Where {SCRIPT}?")
    page = researcher_client.get("/episodes/").content.decode()
    assert SCRIPT not in page and "&lt;script&gt;" in page


# --- the dashboard ---------------------------------------------------------------------------


def test_dashboard_shows_batches_charts_and_the_ablation_table(
    researcher_client, ran_batch, batch_of
) -> None:
    batch_of(query_limit=2, ablate=["evidence_graph", "dedup"])
    page = researcher_client.get("/").content.decode()
    assert "Corpora and benchmarks" in page  # the other sections stay
    assert f'href="/batches/{ran_batch.pk}/"' in page
    charts = json.loads(
        re.search(r'id="chart-data" type="application/json">(.*?)</script>', page).group(1)
    )
    assert charts["conditions"] == ["demo · baseline · max_turns ≤ 40 turns · first 2 queries"]
    names = [s["name"] for s in charts["metrics"]["curated_recall"]]
    assert names == ["-dedup-evidence_graph", "full"]
    full = charts["metrics"]["final_answer_recall"][1]
    expected = [e.final_answer_recall for e in ran_batch.episodes.all()]
    assert full["n"] == [4] and full["y"][0] == pytest.approx(sum(expected) / 4, abs=1e-4)
    assert '<td>demo · baseline · <span class="mono">full</span> <span class="muted' in page
    assert 'hx-trigger="every 2s"' not in page  # nothing running: no polling


def test_dashboard_polls_while_a_batch_runs(researcher_client, ran_batch) -> None:
    RolloutBatch.objects.filter(pk=ran_batch.pk).update(status=BatchStatus.RUNNING)
    page = researcher_client.get("/").content.decode()
    assert 'hx-get="/batches/progress/" hx-trigger="every 2s"' in page
    fragment = researcher_client.get("/batches/progress/").content.decode()
    assert fragment.lstrip().startswith('<div id="batch-table"') and "every 2s" in fragment
    RolloutBatch.objects.filter(pk=ran_batch.pk).update(status=BatchStatus.COMPLETED)
    assert "every 2s" not in researcher_client.get("/batches/progress/").content.decode()


@pytest.mark.parametrize("batches", [1, 4])
def test_the_polled_batch_table_costs_the_same_queries_for_any_number_of_batches(
    researcher_client, batch_of, django_assert_num_queries, batches: int
) -> None:
    for _ in range(batches):
        batch_of()
    with django_assert_num_queries(LOGIN_QUERIES + 1):  # the recent batches with their names
        response = researcher_client.get("/batches/progress/")
    assert response.content.decode().count('href="/batches/') >= batches


@pytest.mark.parametrize("batches", [1, 3])
def test_dashboard_costs_the_same_queries_for_any_number_of_batches(
    researcher_client, batch_of, django_assert_num_queries, batches: int
) -> None:
    for _ in range(batches):
        batch_of(query_limit=1)
    # recent batches, per-condition means, recent ablation matrices, the latest finished one
    with django_assert_num_queries(LOGIN_QUERIES + 4):
        researcher_client.get("/")


# --- groups and comparisons ----------------------------------------------------------------------


def test_group_view_sorts_samples_by_reward_with_advantages(researcher_client, ran_batch) -> None:
    group = ran_batch.groups.order_by("pk").first()
    rewards = [0.9, 0.3]
    for episode, reward in zip(group.episodes.order_by("sample_index"), rewards, strict=True):
        Episode.objects.filter(pk=episode.pk).update(reward=reward)
    view = group_view(pk=group.pk)
    assert [s.episode.reward for s in view.samples] == [0.9, 0.3]
    assert [round(s.advantage, 6) for s in view.samples] == [0.3, -0.3]
    assert all(s.curated for s in view.samples)
    page = researcher_client.get(f"/groups/{group.pk}/").content.decode()
    assert page.index("0.300") < page.index("-0.300")
    assert "★" in page  # gold documents among the curated ones


def test_identical_samples_share_one_card_with_a_neutral_zero_advantage(
    researcher_client, ran_batch
) -> None:
    group = ran_batch.groups.order_by("pk").first()  # the deterministic baseline, twice
    view = group_view(pk=group.pk)
    assert len(view.samples) == 1 and view.samples[0].count == 2
    assert view.samples[0].advantage == 0 and view.zero_variance
    page = researcher_client.get(f"/groups/{group.pk}/").content.decode()
    assert page.count('class="card sample"') == 1
    assert "×2 identical" in page and "gives no learning signal" in page
    assert "status-bad" not in page  # 0.000 is not shown as a loss
    assert "2 samples of one query" in page


def test_samples_that_differ_keep_their_own_cards(researcher_client, ran_batch) -> None:
    group = ran_batch.groups.order_by("pk").first()
    first = group.episodes.order_by("sample_index").first()
    Episode.objects.filter(pk=first.pk).update(curated_recall=0.123)
    view = group_view(pk=group.pk)
    assert [s.count for s in view.samples] == [1, 1]
    page = researcher_client.get(f"/groups/{group.pk}/").content.decode()
    assert "identical" not in page


def test_the_filtered_count_agrees_in_number(researcher_client, ran_batch) -> None:
    one = ran_batch.episodes.order_by("pk").first()
    ran_batch.episodes.update(curated_recall=0.0)
    Episode.objects.filter(pk=one.pk).update(curated_recall=1.0)
    filters = {"batch": ran_batch.pk, "curated_recall_min": "1"}
    page = researcher_client.get("/episodes/", filters).content.decode()
    assert "1 episode matches these filters" in page
    filters["curated_recall_min"] = "0"
    page = researcher_client.get("/episodes/", filters).content.decode()
    assert f"{ran_batch.episodes.count()} episodes match these filters" in page


def test_group_view_costs_four_queries(
    researcher_client, ran_batch, django_assert_num_queries
) -> None:
    group = ran_batch.groups.first()
    with django_assert_num_queries(LOGIN_QUERIES + 4):  # group, episodes, curated items, qrels
        researcher_client.get(f"/groups/{group.pk}/")


def test_compare_aligns_two_runs_of_a_query_turn_by_turn(
    researcher_client, ran_batch, batch_of
) -> None:
    ablated = batch_of(query_limit=1, ablate=["auto_seed"])
    a = ran_batch.episodes.order_by("pk").first()
    b = ablated.episodes.get()
    page = researcher_client.get("/compare/", {"a": a.pk, "b": b.pk}).content.decode()
    assert "full" in page and "-auto_seed" in page
    rows = max(a.turn_rows.count(), b.turn_rows.count())
    assert page.count('<tr id="turn-') == rows
    data = json.loads(
        re.search(r'id="compare-data" type="application/json">(.*?)</script>', page).group(1)
    )
    assert data["a"]["curated"] == list(a.turn_rows.values_list("curated_recall", flat=True))
    assert data["b"]["turns"] == list(b.turn_rows.values_list("index", flat=True))
    assert "in-both" in page
    # The settings that differ are highlighted; the policy version, shared, is not.
    assert '<tr class="differs"><th>Ablation</th>' in page
    assert "<tr><th>Policy version</th>" in page


def test_compare_costs_four_queries(
    researcher_client, ran_batch, django_assert_num_queries
) -> None:
    a, b = ran_batch.episodes.order_by("pk")[:2]
    researcher_client.get("/compare/", {"a": a.pk, "b": b.pk})  # SQLite probes JSON once
    # both episodes, qrels, both episodes' turns, both curation logs
    with django_assert_num_queries(LOGIN_QUERIES + 4):
        researcher_client.get("/compare/", {"a": a.pk, "b": b.pk})


def test_compare_refuses_different_queries_and_missing_episodes(
    researcher_client, ran_batch
) -> None:
    first_group, second_group = ran_batch.groups.order_by("pk")
    a = first_group.episodes.first()
    b = second_group.episodes.first()
    response = researcher_client.get("/compare/", {"a": a.pk, "b": b.pk})
    assert response.status_code == 400 and "different queries" in response.content.decode()
    assert researcher_client.get("/compare/", {"a": a.pk, "b": 99999}).status_code == 400
    assert researcher_client.get("/compare/").status_code == 400


# --- batches -----------------------------------------------------------------------------------


def _launch_data(benchmark, policy, **overrides):
    data = {
        "benchmark": benchmark.pk,
        "policy": policy.pk,
        "samples_per_query": 2,
        "query_limit": 3,
        "max_turns": 12,
        "termination_policy": "max_turns",
        "ablate": ["dedup", "verification"],
    }
    data.update(overrides)
    return data


def test_researcher_launches_a_batch_from_the_form(
    researcher_client, demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        response = researcher_client.post(
            "/batches/new/", _launch_data(demo_benchmark, baseline_policy)
        )
    batch = RolloutBatch.objects.get()
    assert response.status_code == 302 and response.url == f"/batches/{batch.pk}/"
    assert batch.episodes_total == 6 and batch.max_turns == 12
    assert batch.ablation_label == "-dedup-verification"
    assert batch.created_by.username == "rita"
    assert len(callbacks) == 1  # the episodes are enqueued on commit


def test_bad_launch_parameters_show_on_their_field(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    response = researcher_client.post(
        "/batches/new/", _launch_data(demo_benchmark, baseline_policy, samples_per_query=500)
    )
    page = response.content.decode()
    assert response.status_code == 200 and not RolloutBatch.objects.exists()
    assert re.search(
        r'id="samples_per_query-error">samples_per_query must be between 1 and 64, got 500<', page
    )
    response = researcher_client.post(
        "/batches/new/", _launch_data(demo_benchmark, baseline_policy, max_turns=0)
    )
    assert 'id="max_turns-error">max_turns must be between 1 and 200' in response.content.decode()


def test_annotators_cannot_launch_or_cancel(
    annotator_client, ran_batch, demo_benchmark, baseline_policy
) -> None:
    assert annotator_client.get("/batches/new/").status_code == 403
    response = annotator_client.post("/batches/new/", _launch_data(demo_benchmark, baseline_policy))
    assert response.status_code == 403 and RolloutBatch.objects.count() == 1
    assert annotator_client.post(f"/batches/{ran_batch.pk}/cancel/").status_code == 403
    page = annotator_client.get(f"/batches/{ran_batch.pk}/").content.decode()
    assert "Cancel batch" not in page and "Launch batch" not in page


def test_researcher_cancels_a_queued_batch(
    researcher_client, demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks():
        researcher_client.post("/batches/new/", _launch_data(demo_benchmark, baseline_policy))
    batch = RolloutBatch.objects.get()
    page = researcher_client.get(f"/batches/{batch.pk}/").content.decode()
    assert "Cancel batch" in page and 'hx-trigger="every 2s"' in page
    response = researcher_client.post(f"/batches/{batch.pk}/cancel/", follow=True)
    batch.refresh_from_db()
    assert batch.status == BatchStatus.CANCELLED
    assert "6 pending episodes will not run" in response.content.decode()
    assert researcher_client.get(f"/batches/{batch.pk}/cancel/").status_code == 405


def test_batch_page_shows_progress_metrics_and_groups(
    researcher_client, ran_batch, django_assert_num_queries
) -> None:
    # batch, means, termination reasons, group count, groups page
    with django_assert_num_queries(LOGIN_QUERIES + 5):
        page = researcher_client.get(f"/batches/{ran_batch.pk}/").content.decode()
    assert "4 of 4 episodes finished" in page
    for group in ran_batch.groups.all():
        assert f'href="/groups/{group.pk}/"' in page
    assert "every 2s" not in page


# --- saved filters -----------------------------------------------------------------------------


def test_a_named_filter_is_saved_per_user_and_links_back(researcher_client, ran_batch) -> None:
    from django.test import Client

    from harness_app.roles import Role
    from harness_app.services.users import user_ensure
    from trajectories.models import SavedFilter

    other = Client()  # the client fixtures share one Client, so a second user needs its own
    other.force_login(user_ensure(username="olga", password="pw-olga-1234", role=Role.ANNOTATOR)[0])

    response = researcher_client.post(
        "/episodes/saved/",
        {"name": "good runs", "query_string": "status=completed&bogus=1&curated_recall_min=0.5"},
    )
    saved = SavedFilter.objects.get()
    assert saved.query_string == "status=completed&curated_recall_min=0.5"  # canonical
    assert response.url == "/episodes/?status=completed&curated_recall_min=0.5"
    page = researcher_client.get("/episodes/").content.decode()
    assert 'href="?status=completed&amp;curated_recall_min=0.5">good runs</a>' in page
    assert "good runs" not in other.get("/episodes/").content.decode()
    # Saving the same name again replaces it; another user cannot delete it.
    researcher_client.post("/episodes/saved/", {"name": "good runs", "query_string": "q=x"})
    assert SavedFilter.objects.get().query_string == "q=x"
    other.post(f"/episodes/saved/{saved.pk}/delete/")
    assert SavedFilter.objects.exists()
    researcher_client.post(f"/episodes/saved/{saved.pk}/delete/")
    assert not SavedFilter.objects.exists()


def test_the_save_form_carries_the_current_filters(researcher_client, ran_batch) -> None:
    page = researcher_client.get(
        "/episodes/", {"status": "completed", "q": "<b>", "page": "1"}
    ).content.decode()
    assert 'name="query_string" value="q=%3Cb%3E&amp;status=completed"' in page
