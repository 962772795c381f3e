"""Staff get the Django admin for every model; rollout records there are view-only."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model

from harness_app.roles import Role
from tests import factories
from trajectories.models import (
    AnnotationLabel,
    Episode,
    EpisodeKind,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    pack_floats,
    pack_ints,
)
from trajectories.services.annotations import annotation_label
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db

EPISODES = "/admin/trajectories/episode/"
EVENTS = "/admin/trajectories/annotationevent/"


@pytest.mark.parametrize("app_label", ["harness_app", "trajectories", "training"])
def test_every_model_of_the_app_is_in_the_admin(app_label: str) -> None:
    # Loops over the app's models, so a model added later without an admin fails here.
    models = apps.get_app_config(app_label).get_models()
    missing = sorted(m.__name__ for m in models if not admin.site.is_registered(m))
    assert missing == [], f"{app_label} models missing from the admin: {missing}"


@pytest.fixture
def batch() -> RolloutBatch:
    """A demo batch of two queued episodes (never run: the test transaction never commits)."""
    return batch_create(
        benchmark=factories.demo_benchmark(), policy=factories.baseline_policy(), query_limit=2
    )


@pytest.fixture
def staff(client):
    # Like the demo's researcher: staff, with no per-model permissions.
    user = factories.user("boss", Role.RESEARCHER)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return user


def test_staff_browse_episodes_and_the_audit_trail(client, staff, batch) -> None:
    finished = factories.synthetic_episodes(batch, 1, termination_reason="format_errors")[0]
    annotation_label(
        annotator=staff, episode=finished, label=AnnotationLabel.REJECT, reason="format"
    )

    index = client.get("/admin/").content.decode()
    assert all(name in index for name in ("Episodes", "Model calls", "Annotation events", "Qrels"))

    response = client.get(EPISODES)
    assert response.status_code == 200
    page = response.content.decode()
    assert f'href="{EPISODES}{finished.pk}/change/' in page
    assert f"batch {batch.pk} (" in page  # the batch column
    assert "format_errors" in page  # the termination reason column

    response = client.get(EVENTS)
    assert response.status_code == 200
    results = response.content.decode().split('id="result_list"', 1)[1]
    row = results.split("<tbody>", 1)[1].split("</tr>", 1)[0]  # the newest event
    assert "Labelled" in row and str(finished) in row and ">boss<" in row


@pytest.mark.parametrize("url", [EPISODES, EVENTS])
def test_a_researcher_without_staff_is_sent_to_the_admin_login(client, url: str) -> None:
    client.force_login(factories.user("rita", Role.RESEARCHER))
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_rollout_records_cannot_be_added_or_edited_even_by_a_superuser(client, batch) -> None:
    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw-123456")
    client.force_login(root)
    episode = batch.episodes.first()
    assert client.get(f"{EPISODES}add/").status_code == 403
    response = client.post(f"{EPISODES}{episode.pk}/change/", {"status": "completed"})
    assert response.status_code == 403
    episode.refresh_from_db()
    assert episode.status == EpisodeStatus.PENDING
    page = client.get(f"{EPISODES}{episode.pk}/change/").content.decode()
    assert 'name="_save"' not in page  # the detail page has no save button


def test_a_model_call_page_shows_token_counts_not_raw_bytes(client, staff, batch) -> None:
    call = ModelCall.objects.create(
        episode=batch.episodes.first(),
        turn_index=0,
        request={"prompt": [1, 2, 3, 4]},
        prompt_token_ids_blob=pack_ints([1, 2, 3, 4]),
        completion_token_ids_blob=pack_ints([7, 8]),
        completion_logprobs_blob=pack_floats([-0.5, -0.25]),
    )
    response = client.get(f"/admin/trajectories/modelcall/{call.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert re.search(r"Prompt tokens:</label>\s*<div class=\"readonly\">4</div>", page)
    assert re.search(r"Completion tokens:</label>\s*<div class=\"readonly\">2</div>", page)
    assert "memory at 0x" not in page


def test_episode_changelist_reads_a_page_in_seven_queries_however_many_episodes(
    client, staff, batch, django_assert_num_queries
) -> None:
    factories.synthetic_episodes(batch, 60)
    Episode.objects.create(kind=EpisodeKind.RECORDED, status=EpisodeStatus.COMPLETED)
    # Session, user, the user's own and group permissions (the sidebar lists the models
    # that use Django's permissions), one count, one page of episodes joined to their batch
    # and query, and the user's roles for the navigation. A missing list_select_related
    # would add a query per row.
    with django_assert_num_queries(7):
        response = client.get(EPISODES)
    assert response.context["cl"].result_count == 63
    rows = re.findall(rf'href="{EPISODES}\d+/change/', response.content.decode())
    assert len(rows) == 63  # one row per episode, recorded ones included
