"""SFT export pages: an export is created from the page, listed, downloaded; the list
filters by episode; the launch forms take the export and its policy from the link."""

from __future__ import annotations

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from training.models import SFTExport
from training.services.exports import sft_export_run
from trajectories.models import Episode

pytestmark = pytest.mark.django_db


def _form(**overrides: str) -> dict[str, str]:
    data = {"fmt": "chat", "reconstruction": "prefix_merge", "more_filters": ""}
    return {**data, **overrides}


def _post(client, data, capture):
    with capture(execute=False):
        return client.post("/training/exports/new/", data)


def test_export_created_from_the_page_is_listed_and_downloadable(
    researcher_client, approved, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    form = _form(batch=str(approved.pk), policy=str(baseline_policy.pk))
    response = _post(researcher_client, form, django_capture_on_commit_callbacks)

    export = SFTExport.objects.get()
    assert response.status_code == 302 and response.url == f"/training/exports/{export.pk}/"
    assert export.filters == {
        "batch": approved.pk,
        "policy": baseline_policy.pk,
        "annotation_status": "approved",
    }
    sft_export_run(export_id=export.pk)  # what the worker does with the queued task
    page = researcher_client.get(response.url).content.decode()
    download = f'href="/api/exports/{export.pk}/download/"'
    assert download in page
    assert f'href="/training/sft/new/?export={export.pk}"' in page
    rl_link = (
        f"/training/rl/new/?base_policy={baseline_policy.pk}&amp;benchmark={approved.benchmark_id}"
    )
    assert f'href="{rl_link}"' in page
    assert download in researcher_client.get("/training/exports/").content.decode()
    body = b"".join(researcher_client.get(f"/api/exports/{export.pk}/download/").streaming_content)
    assert len(body.splitlines()) == 2


def test_a_bad_filter_is_named_on_its_field(
    researcher_client, django_capture_on_commit_callbacks
) -> None:
    bad_ids = _post(researcher_client, _form(ids="3,x"), django_capture_on_commit_callbacks)
    bad_more = _post(
        researcher_client, _form(more_filters='{"warmth": 1}'), django_capture_on_commit_callbacks
    )

    assert "ids" in bad_ids.context["form"].errors
    assert "unknown filter" in str(bad_more.context["form"].errors["more_filters"])
    assert not SFTExport.objects.exists()


def test_the_episode_lists_export_link_prefills_the_ids(researcher_client) -> None:
    response = researcher_client.get("/exports/new/?episodes=3,7")
    assert response.status_code == 302
    assert response.url == "/training/exports/new/?episodes=3,7"
    page = researcher_client.get(response.url).content.decode()
    assert 'value="3,7"' in page


def test_the_list_filters_by_episode(
    researcher_client, approved, django_capture_on_commit_callbacks
) -> None:
    first, second = Episode.objects.filter(batch=approved).order_by("pk")
    for episode in (first, second):
        form = _form(ids=str(episode.pk))
        _post(researcher_client, form, django_capture_on_commit_callbacks)
    holding_first, holding_second = SFTExport.objects.order_by("pk")
    for export in (holding_first, holding_second):
        sft_export_run(export_id=export.pk)

    page = researcher_client.get(f"/training/exports/?episode={first.pk}").content.decode()
    assert f'href="/training/exports/{holding_first.pk}/"' in page
    assert f'href="/training/exports/{holding_second.pk}/"' not in page
    viewer = researcher_client.get(f"/episodes/{first.pk}/").content.decode()
    assert f'href="/training/exports/?episode={first.pk}"' in viewer


def test_annotators_read_exports_but_cannot_create_them(annotator_client) -> None:
    assert annotator_client.get("/training/exports/").status_code == 200
    assert annotator_client.get("/training/exports/new/").status_code == 403


def test_rl_launch_form_takes_the_base_policy_from_the_link(researcher_client) -> None:
    policy = PolicyConfig.objects.create(name="student", kind=PolicyKind.OPENAI, model="m")
    page = researcher_client.get(f"/training/rl/new/?base_policy={policy.pk}").content.decode()
    assert f'<option value="{policy.pk}" selected>student</option>' in page


@pytest.mark.parametrize(
    ("url", "labels"),
    [
        (
            "/training/rl/new/",
            ["LoRA rank", "CISPO ε low", "CISPO ε high", "KL β", "Group size (G)"],
        ),
        ("/training/sft/new/", ["LoRA rank", "Learning rate", "Gradient accumulation"]),
    ],
)
def test_launch_forms_label_and_explain_every_field(researcher_client, url, labels) -> None:
    response = researcher_client.get(url)
    page = response.content.decode()
    assert all(f">{label}</label>" in page for label in labels)
    form = response.context["form"]
    assert [name for name, field in form.fields.items() if not field.help_text] == []


@pytest.mark.parametrize("count", [1, 6])
def test_the_list_costs_the_same_queries_for_1_or_6_exports(
    researcher_client, researcher, django_assert_num_queries, count: int
) -> None:
    for _ in range(count):
        SFTExport.objects.create(created_by=researcher, filters={"batch": 1})
    with django_assert_num_queries(3 + 2):  # the login's 3, then count and page
        page = researcher_client.get("/training/exports/").content.decode()
    assert page.count("rita") == count + 1  # each row's creator, and the account


def test_an_export_by_batch_launches_rl_from_the_policy_its_episodes_came_from(
    researcher_client, approved, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    # Its filters name only the batch: the policy and benchmark come from its episodes.
    response = _post(
        researcher_client, _form(batch=str(approved.pk)), django_capture_on_commit_callbacks
    )
    export = SFTExport.objects.get()
    sft_export_run(export_id=export.pk)
    page = researcher_client.get(response.url).content.decode()
    rl_link = (
        f"/training/rl/new/?base_policy={baseline_policy.pk}&amp;benchmark={approved.benchmark_id}"
    )
    assert f'href="{rl_link}"' in page
