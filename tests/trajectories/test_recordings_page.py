"""The recording-session pages: the list with its counts, the create form that shows the
key once, and close and revoke for the session's owner only."""

from __future__ import annotations

import html
import re
import subprocess
from typing import Any

import pytest

from harness_app.roles import Role
from tests import factories
from trajectories.models import ModelCall, RecordingSession
from trajectories.services.recording import (
    RecordedCall,
    key_hash,
    recorded_call_save,
    recording_session_create,
)

pytestmark = pytest.mark.django_db


def _call(session: RecordingSession) -> None:
    recorded_call_save(
        session=session,
        call=RecordedCall(
            request={"messages": []},
            response={"choices": [{"finish_reason": "stop"}]},
            prompt_ids=[1, 2, 3],
            completion_ids=[4, 5],
            logprobs=[-0.1, -0.2],
            agent="a",
            policy_version="v1",
            latency_ms=3.0,
        ),
    )


def _create(client: Any, **fields: Any) -> Any:
    data = {"name": "swe", "task": "t1", "ttl_hours": "2", **fields}
    return client.post("/recordings/new/", data)


def test_a_researcher_sees_sessions_with_counts_in_a_fixed_number_of_queries(
    researcher_client, researcher, django_assert_num_queries
):
    for n in range(3):
        session, _ = recording_session_create(user=researcher, name=f"run {n}", task="t")
        for _ in range(n):
            _call(session)
    # session, user, roles, count, the page's rows
    with django_assert_num_queries(5):
        response = researcher_client.get("/recordings/")
    body = response.content.decode()
    assert response.status_code == 200
    rows = re.findall(r'<td class="num calls">(\d+)</td>\s*<td class="num">(\d+)</td>', body)
    assert rows == [("2", "10"), ("1", "5"), ("0", "0")]  # newest first; 3 + 2 ids a call
    assert body.count(">open</td>") == 3 and body.count(">Close</button>") == 3


def test_the_empty_list_says_what_a_session_is(researcher_client):
    body = researcher_client.get("/recordings/").content.decode()
    assert "No recording sessions yet." in body and "POST /api/recordings/" in body


def test_the_environment_lines_reach_an_agent_when_pasted_into_a_shell(researcher_client):
    body = _create(researcher_client).content.decode()
    for block, names in (("env-openai", "OPENAI"), ("env-anthropic", "ANTHROPIC")):
        lines = re.search(rf'<pre id="{block}" class="mono">(.*?)</pre>', body, re.S).group(1)
        # The pasted lines, then a child process as the agent: it must see both variables.
        script = html.unescape(lines) + f"\nsh -c 'echo \"${names}_BASE_URL ${names}_API_KEY\"'"
        seen = subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout
        base_url, key = seen.split()
        assert base_url.startswith("http://testserver/proxy/hrk_") and key.startswith("hrk_")


def test_annotators_are_refused(annotator_client):
    assert annotator_client.get("/recordings/").status_code == 403
    assert _create(annotator_client).status_code == 403


def test_create_shows_the_key_once_and_stores_only_its_hash(researcher_client):
    response = _create(researcher_client, temperature="0.7", model_map="claude-x=smol\n*=smol")
    body = response.content.decode()
    key = re.search(r'<code id="session-key" class="mono">(hrk_[\w-]+)</code>', body).group(1)
    assert f"OPENAI_BASE_URL=http://testserver/proxy/{key}/v1" in body
    assert f"ANTHROPIC_BASE_URL=http://testserver/proxy/{key}\n" in body
    assert "no-store" in response["Cache-Control"]
    session = RecordingSession.objects.get()
    assert session.key_hash == key_hash(key) and session.sampling["temperature"] == 0.7
    assert session.sampling["model_map"] == {"claude-x": "smol", "*": "smol"}
    assert session.name == "swe" and (session.expires_at - session.created_at).seconds > 7000
    assert key not in str(RecordingSession.objects.values().get())
    assert key not in researcher_client.get("/recordings/").content.decode()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"temperature": "5"}, "temperature"),
        ({"top_p": "0"}, "top_p"),
        ({"max_tokens": "0"}, "max_tokens"),
        ({"model_map": "no equals sign"}, "model_map"),
        ({"ttl_hours": "100000"}, "ttl_hours"),
    ],
)
def test_a_bad_input_is_named_by_its_field(researcher_client, fields, field):
    response = _create(researcher_client, **fields)
    assert response.status_code == 200
    assert f'id="{field}-error"' in response.content.decode()
    assert not RecordingSession.objects.exists()


def test_the_owner_closes_and_revokes(researcher_client, researcher):
    first, _ = recording_session_create(user=researcher, name="a")
    second, _ = recording_session_create(user=researcher, name="b")
    response = researcher_client.post(f"/recordings/{first.pk}/close/", follow=True)
    assert f"Recording session {first.pk} closed" in response.content.decode()
    researcher_client.post(f"/recordings/{second.pk}/revoke/")
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.closed_at is not None and first.episode.status == "completed"
    assert second.revoked_at is not None


def test_another_researcher_is_refused_with_a_message(client, researcher):
    session, _ = recording_session_create(user=researcher, name="a")
    client.force_login(factories.user("rob", Role.RESEARCHER))
    for action in ("close", "revoke"):
        response = client.post(f"/recordings/{session.pk}/{action}/", follow=True)
        assert "only its owner or staff may close or revoke it" in response.content.decode()
    body = client.get("/recordings/").content.decode()
    assert ">Close</button>" not in body
    session.refresh_from_db()
    assert session.closed_at is None and session.revoked_at is None
    assert not ModelCall.objects.exists()


def test_staff_close_a_colleagues_session_and_expired_ones_show_as_expired(client, researcher):
    session, _ = recording_session_create(user=researcher, name="a")
    stale, _ = recording_session_create(user=researcher, name="b")
    RecordingSession.objects.filter(pk=stale.pk).update(expires_at=stale.created_at)
    staff = factories.user("sam", Role.RESEARCHER)
    staff.is_staff = True
    staff.save()
    client.force_login(staff)
    client.post(f"/recordings/{session.pk}/close/")
    body = client.get("/recordings/").content.decode()
    assert ">closed</td>" in body and ">expired</td>" in body and ">Close</button>" not in body


def test_the_recorded_episode_list_shows_session_columns(client, researcher):
    client.force_login(researcher)
    session, _ = recording_session_create(user=researcher, name="codex run")
    page = client.get("/episodes/?kind=recorded").content.decode()
    assert "codex run" in page and session.key_hint in page
    assert "<th>State</th>" in page and "Traj. recall" not in page
    assert ">open<" in page
    assert "Traj. recall" in client.get("/episodes/").content.decode()
