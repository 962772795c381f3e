"""The harness API (/api/harness-tasks/, /api/harness-groups/) and the harness pages."""

from __future__ import annotations

import pytest

from tests import factories
from trajectories.models import HarnessGroup, HarnessRun, HarnessTask, RecordingSession

pytestmark = pytest.mark.django_db

LOGIN_QUERIES = 3  # session, user, the user's groups
TASK = {
    "name": "fix add",
    "instruction": "Make add() add.",
    "files": {"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "x"},
    "eval_command": "python -m pytest -q",
    "timeout_s": 300,
}


# --- API -----------------------------------------------------------------------------------


def test_a_researcher_creates_a_task_and_launches_a_group(
    researcher_api, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr(
        "harness_app.queues.enqueue", lambda name, *args, **kw: sent.append((name, args, kw))
    )
    response = researcher_api.post("/api/harness-tasks/", TASK, format="json")
    assert response.status_code == 201, response.content
    task = response.json()
    assert task["files"] == TASK["files"] and task["eval_timeout_s"] == 120
    assert task["created_by"] == "rita"

    launch = {
        "task": task["id"],
        "kind": "command",
        "command": ["python", "agent.py"],
        "model": "smollm2",
        "size": 3,
        "sampling": {"temperature": 1.0, "max_tokens": 512},
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = researcher_api.post("/api/harness-groups/", launch, format="json")
    assert response.status_code == 201, response.content
    group = response.json()
    assert group["status"] == "queued" and group["size"] == 3
    assert [r["index"] for r in group["runs"]] == [0, 1, 2]
    assert all(r["status"] == "queued" and r["reward"] is None for r in group["runs"])
    # One worker task per run, each with a time limit above the task's two timeouts.
    assert [args for _, args, _ in sent] == [(r["id"],) for r in group["runs"]]
    assert all(kw["time_limit"] > 300 + 120 for _, _, kw in sent)
    sessions = RecordingSession.objects.filter(task=group["task_key"])
    assert sessions.count() == 3
    # As the proxy applies them: the trainer's values, the clamp on, every name mapped.
    expected = {**launch["sampling"], "top_p": None, "clamp": True, "model_map": {"*": "smollm2"}}
    assert all(s.sampling == expected for s in sessions)


def test_a_group_detail_has_rewards_and_advantages(researcher_api, annotator_api):
    group = factories.harness_group_finished([1.0, 0.0, None])
    body = annotator_api.get(f"/api/harness-groups/{group.pk}/").json()
    assert body["status"] == "finished" and body["runs_finished"] == 3
    assert [r["reward"] for r in body["runs"]] == [1.0, 0.0, None]
    assert [r["advantage"] for r in body["runs"]] == [0.5, -0.5, None]
    assert body["runs"][2]["excluded"].startswith("no_reward")
    assert body["reward_mean"] == 0.5 and body["advantages_dropped"] is False
    listed = researcher_api.get(f"/api/harness-groups/?task={group.task_id}").json()
    assert [g["id"] for g in listed["results"]] == [group.pk]
    assert researcher_api.get("/api/harness-groups/?task=999999").json()["results"] == []


def test_annotators_read_but_cannot_create_or_launch(annotator_api, anonymous_api):
    group = factories.harness_group_finished([1.0])
    assert annotator_api.get("/api/harness-tasks/").status_code == 200
    assert annotator_api.get(f"/api/harness-tasks/{group.task_id}/").status_code == 200
    assert annotator_api.post("/api/harness-tasks/", TASK, format="json").status_code == 403
    launch = {"task": group.task_id, "kind": "command", "command": ["x"], "model": "m", "size": 1}
    assert annotator_api.post("/api/harness-groups/", launch, format="json").status_code == 403
    assert anonymous_api.get("/api/harness-groups/").status_code in (401, 403)
    assert HarnessGroup.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"files": {"../x": "y"}}, "files", "'..'"),
        ({"files": {"/abs": "y"}}, "files", "relative"),
        ({"files": "calc.py"}, "files", "JSON object"),
        ({"name": ""}, "name", ""),
        ({"eval_command": "  "}, "eval_command", "blank"),
        ({"timeout_s": 0}, "timeout_s", "between 1 and"),
    ],
)
def test_task_validation_names_the_field(researcher_api, change, field, message):
    response = researcher_api.post("/api/harness-tasks/", {**TASK, **change}, format="json")
    assert response.status_code == 400
    assert message in response.json()[field][0]
    assert not HarnessTask.objects.exists()


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"kind": "vim"}, "kind", "not a valid choice"),
        ({"command": []}, "command", "needs command"),
        ({"kind": "pi"}, "command", "only for kind 'command'"),
        ({"size": 0}, "size", "between 1 and"),
        ({"sampling": {"temp": 1}}, "sampling.temp", "unknown sampling override"),
        ({"task": 999999}, "task", "does not exist"),
    ],
)
def test_launch_validation_names_the_field(researcher_api, change, field, message):
    task = researcher_api.post("/api/harness-tasks/", TASK, format="json").json()
    launch = {"task": task["id"], "kind": "command", "command": ["x"], "model": "m", "size": 2}
    response = researcher_api.post("/api/harness-groups/", {**launch, **change}, format="json")
    assert response.status_code == 400
    assert message in response.json()[field][0]
    assert not HarnessRun.objects.exists()


# --- pages ---------------------------------------------------------------------------------


def test_the_task_pages_list_tasks_and_their_groups(researcher_client, django_assert_num_queries):
    group = factories.harness_group_finished([1.0, 0.0])
    factories.harness_group_finished([0.0])
    researcher_client.get("/harness/tasks/")  # warm the session
    with django_assert_num_queries(LOGIN_QUERIES + 2):  # count, page
        page = researcher_client.get("/harness/tasks/").content.decode()
    assert f'href="/harness/tasks/{group.task_id}/"' in page and "fix the bug" in page

    with django_assert_num_queries(LOGIN_QUERIES + 3):  # task, count, page of groups
        page = researcher_client.get(f"/harness/tasks/{group.task_id}/").content.decode()
    assert f'href="/harness/groups/{group.pk}/"' in page
    assert "calc.py" in page and "return a - b" in page and "python -m pytest -q" in page
    assert "2/2" in page  # runs done


def test_the_group_page_shows_runs_rewards_and_advantages(
    researcher_client, django_assert_num_queries
):
    group = factories.harness_group_finished([1.0, 0.0])
    runs = list(group.runs.order_by("index"))
    researcher_client.get(f"/harness/groups/{group.pk}/")
    with django_assert_num_queries(LOGIN_QUERIES + 2):  # group, runs with sessions
        page = researcher_client.get(f"/harness/groups/{group.pk}/").content.decode()
    for run in runs:
        assert f'href="/harness/runs/{run.pk}/"' in page
    assert "0.500" in page and "-0.500" in page
    assert group.task_key in page


def test_the_run_page_shows_calls_chains_token_strips_evaluation_and_output(researcher_client):
    group = factories.harness_group_finished([1.0, 0.0])
    run = group.runs.get(index=0)
    HarnessRun.objects.filter(pk=run.pk).update(
        stderr="<b>warning</b> from the CLI", eval_output="1 passed\nreward: 1.0"
    )
    page = researcher_client.get(f"/harness/runs/{run.pk}/").content.decode()

    assert "Calls in order" in page and page.count('<td class="mono">chat</td>') == 2
    # Both calls prefix-merge into one chain, which starts at the first call.
    assert "Chain 1 · main agent" in page and "Chain 2" not in page
    assert 'chain starts: <span class="mono">first_call' in page
    episode = run.session.episode_id
    assert f'hx-get="/episodes/{episode}/turns/0/tokens/"' in page
    assert f'hx-get="/episodes/{episode}/turns/1/tokens/"' in page
    assert "1 passed" in page and "reward: 1.0" in page
    assert "agent done" in page and "&lt;b&gt;warning&lt;/b&gt; from the CLI" in page
    strip = researcher_client.get(f"/episodes/{episode}/turns/1/tokens/")
    assert strip.status_code == 200
    # The recorded episode's page leads back to the run.
    episode_page = researcher_client.get(f"/episodes/{episode}/").content.decode()
    assert f'href="/harness/runs/{run.pk}/">run 0 of group {group.pk}' in episode_page
    assert researcher_client.get("/harness/runs/999999/").status_code == 404


def test_the_nav_links_the_harness_tasks(researcher_client):
    page = researcher_client.get("/harness/tasks/").content.decode()
    assert '<a href="/harness/tasks/">Harness tasks</a>' in page
