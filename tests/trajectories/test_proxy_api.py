"""The recording-session API: create (key shown once), permissions, validation, close."""

from __future__ import annotations

import json

import pytest

from harness_app.roles import Role
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import EpisodeStatus, RecordingSession

pytestmark = pytest.mark.django_db


def test_a_researcher_creates_a_session_and_records_through_its_base_url(
    researcher_api, client, settings
):
    response = researcher_api.post(
        "/api/recordings/", {"name": "swe agent", "task": "issue-42", "metadata": {"repo": "x"}}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    key = body["key"]
    assert key.startswith("hrk_") and body["key_hint"] == key[:12]
    assert body["base_url"] == f"http://testserver/proxy/{key}/v1"
    assert body["state"] == "open" and body["status"] == EpisodeStatus.RUNNING
    assert body["task"] == "issue-42" and body["metadata"] == {"repo": "x"}

    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        path = body["base_url"].removeprefix("http://testserver") + "/chat/completions"
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = client.post(path, data=json.dumps(chat), content_type="application/json")
        assert answer.status_code == 200

    # The key is never shown again.
    detail = researcher_api.get(f"/api/recordings/{body['id']}/").json()
    assert "key" not in detail and detail["base_url"] is None and detail["calls"] == 1
    listed = researcher_api.get("/api/recordings/").json()
    assert key not in json.dumps(listed)

    closed = researcher_api.post(
        f"/api/recordings/{body['id']}/close/", {"reward": 0.75, "metadata": {"passed": True}}
    ).json()
    assert closed["state"] == "closed" and closed["status"] == EpisodeStatus.COMPLETED
    assert closed["reward"] == 0.75 and closed["trainable"] is True
    assert closed["metadata"] == {"repo": "x", "passed": True}

    trajectory = researcher_api.get(f"/api/recordings/{body['id']}/trajectory/").json()
    assert len(trajectory["chains"]) == 1 and trajectory["chains"][0]["sampled_tokens"] == 8

    episode = researcher_api.get(f"/api/episodes/{body['episode']}/").json()
    assert episode["kind"] == "recorded" and episode["batch"] is None
    assert episode["question"] is None and episode["reward"] == 0.75


def test_annotators_read_sessions_but_cannot_create_close_or_revoke(researcher_api, annotator_api):
    created = researcher_api.post("/api/recordings/", {}).json()
    denied = annotator_api.post("/api/recordings/", {"name": "mine"})
    assert denied.status_code == 403
    assert "researcher role" in denied.json()["detail"]
    for verb in ("close", "revoke"):
        assert annotator_api.post(f"/api/recordings/{created['id']}/{verb}/").status_code == 403
    assert annotator_api.get(f"/api/recordings/{created['id']}/").status_code == 200
    assert RecordingSession.objects.count() == 1


def test_anonymous_callers_get_401(db):
    assert factories.client_for(None).post("/api/recordings/", {}).status_code == 401


def test_validation_errors_name_the_field_and_the_rule(researcher_api):
    response = researcher_api.post("/api/recordings/", {"ttl_s": 5})
    assert response.status_code == 400
    assert response.json() == {"ttl_s": ["ttl_s must be between 60 and 2592000 seconds, got 5"]}
    response = researcher_api.post("/api/recordings/", {"metadata": [1, 2]}, format="json")
    assert response.status_code == 400 and "metadata" in response.json()
    assert RecordingSession.objects.count() == 0

    created = researcher_api.post("/api/recordings/", {}).json()
    bad_reward = researcher_api.post(f"/api/recordings/{created['id']}/close/", {"reward": "x"})
    assert bad_reward.status_code == 400 and "reward" in bad_reward.json()
    mode = researcher_api.get(f"/api/recordings/{created['id']}/trajectory/?mode=whole")
    assert mode.json() == {
        "mode": ["'whole' is not one of prefix_merge, per_request, prefix, request"]
    }
    researcher_api.post(f"/api/recordings/{created['id']}/close/", {})
    again = researcher_api.post(f"/api/recordings/{created['id']}/close/", {})
    assert again.status_code == 400
    assert again.json() == {
        "non_field_errors": [f"recording session {created['id']} is already closed"]
    }


def test_revoking_keeps_the_recording_and_refuses_the_key(researcher_api, client):
    created = researcher_api.post("/api/recordings/", {}).json()
    revoked = researcher_api.post(f"/api/recordings/{created['id']}/revoke/").json()
    assert revoked["state"] == "revoked" and revoked["revoked_at"]
    response = client.get(f"/proxy/{created['key']}/v1/models")
    assert response.status_code == 403 and "revoked" in response.json()["error"]["message"]


def test_only_its_owner_or_staff_closes_or_revokes_a_session(researcher_api):
    created = researcher_api.post("/api/recordings/", {"name": "rita's"}).json()
    colleague = factories.client_for(factories.user("ravi", Role.RESEARCHER))
    for action in ("close", "revoke"):
        refused = colleague.post(f"/api/recordings/{created['id']}/{action}/", {})
        assert refused.status_code == 403, action
        assert "only its owner or staff" in refused.json()["detail"]
    assert RecordingSession.objects.get(pk=created["id"]).revoked_at is None
    staff = factories.user("sam", Role.RESEARCHER)
    staff.is_staff = True
    staff.save()
    revoked = factories.client_for(staff).post(f"/api/recordings/{created['id']}/revoke/", {})
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    closed = researcher_api.post(f"/api/recordings/{created['id']}/close/", {})
    assert closed.status_code == 200 and closed.json()["state"] == "closed"
