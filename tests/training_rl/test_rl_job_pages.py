"""The RL job pages and API: who may launch, what a bad request says, what a job shows."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from tests import factories
from tests.training_rl.jobs import job_create, rollouts_finish
from training.models import RLJob, RLJobStatus, RLStep
from training.services.rl_jobs import rl_job_advance

pytestmark = pytest.mark.django_db

LOGIN_QUERIES = 3  # session, user, the user's groups


@pytest.fixture
def policy(lora_server) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="smollm2"
    )


@pytest.fixture
def job_with_steps(policy, weights_dir) -> RLJob:
    """A job with one finished step (no reward variance, so nothing trained) and a second
    step whose rollouts are running."""
    job = job_create(factories.demo_benchmark(), policy, weights_dir, steps=3)
    rl_job_advance(job_id=job.pk)
    step = job.step_rows.get()
    assert step.batch is not None
    rollouts_finish(step.batch, [0.5, 0.5, 0.2, 0.2])
    rl_job_advance(job_id=job.pk)
    rl_job_advance(job_id=job.pk)
    job.refresh_from_db()
    return job


def _launch_data(policy: PolicyConfig, weights: Any, **extra: Any) -> dict[str, Any]:
    data = {
        "benchmark": factories.demo_benchmark().pk,
        "base_policy": policy.pk,
        "base_model_dir": str(weights),
        "steps": 2,
        "group_size": 4,
        "queries_per_step": 2,
        "algorithm": "cispo",
        "learning_rate": 1e-5,
        "lora_rank": 8,
        "cispo_eps_low": 1.0,
        "cispo_eps_high": 4.0,
        "grpo_eps": 0.2,
        "kl_beta": 0.0,
        "max_turns": 6,
        "termination_policy": "max_turns",
        "reward_weights": "{}",
    }
    return {**data, **extra}


# --- pages -----------------------------------------------------------------------------------


def test_an_annotator_sees_jobs_but_cannot_reach_the_launch_form(annotator_client, job_with_steps):
    listing = annotator_client.get("/training/rl/").content.decode()
    assert f'href="/training/rl/{job_with_steps.pk}/"' in listing
    assert "/training/rl/new/" not in listing
    response = annotator_client.get("/training/rl/new/")
    assert response.status_code == 403
    assert "researcher" in response.content.decode()
    assert annotator_client.post(f"/training/rl/{job_with_steps.pk}/cancel/").status_code == 403


def test_the_launch_form_creates_a_job_and_goes_to_its_page(
    researcher_client,
    policy,
    weights_dir,
):
    response = researcher_client.post("/training/rl/new/", _launch_data(policy, weights_dir))
    job = RLJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/training/rl/{job.pk}/"
    assert (job.group_size, job.queries_per_step, job.steps) == (4, 2, 2)
    assert job.created_by is not None and job.created_by.username == "rita"


@pytest.mark.parametrize(
    ("typed", "stored"),
    [('"harness1"', {"preset": "harness1"}), ('{"preset": "harness1"}', {"preset": "harness1"})],
)
def test_the_launch_form_takes_a_reward_preset_by_name(
    researcher_client, policy, weights_dir, typed, stored
):
    data = _launch_data(policy, weights_dir, reward_weights=typed)
    response = researcher_client.post("/training/rl/new/", data)
    assert response.status_code == 302
    assert RLJob.objects.get().reward_weights == stored


def test_the_launch_form_names_an_unknown_reward_preset(researcher_client, policy, weights_dir):
    data = _launch_data(policy, weights_dir, reward_weights='"paper"')
    page = researcher_client.post("/training/rl/new/", data).content.decode()
    assert "unknown reward preset" in page and "harness1" in page
    assert not RLJob.objects.exists()


def test_the_launch_form_shows_a_service_refusal_on_its_field(
    researcher_client,
    policy,
    tmp_path,
):
    response = researcher_client.post("/training/rl/new/", _launch_data(policy, tmp_path))
    page = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'id="base_model_dir-error">base_model_dir .* has no config.json', page)
    assert not RLJob.objects.exists()


def test_a_job_page_shows_steps_linking_to_their_rollout_groups_and_the_curves(
    researcher_client, job_with_steps, django_assert_num_queries
):
    # job, steps (+ versions, batches), groups with queries, versions
    with django_assert_num_queries(LOGIN_QUERIES + 4):
        response = researcher_client.get(f"/training/rl/{job_with_steps.pk}/")
    page = response.content.decode()
    first, second = RLStep.objects.filter(job=job_with_steps).order_by("index")
    assert first.batch is not None and second.batch is not None
    for group_id in first.batch.groups.values_list("pk", flat=True):
        assert f'href="/groups/{group_id}/"' in page
    assert f'href="/batches/{second.batch.pk}/"' in page
    assert "Done, nothing to train on" in page and "Sampling rollouts" in page
    curves = json.loads(re.search(r'id="rl-curves"[^>]*>(.*?)</script>', page, re.S)[1])
    assert curves["steps"] == [0]  # only finished steps have points
    assert curves["series"]["kept_fraction"] == [0.0]
    assert curves["series"]["reward_mean"] == [pytest.approx(0.35)]
    assert "f_beta" in curves["components"]
    # The progress fragment keeps polling while the job runs.
    progress = researcher_client.get(f"/training/rl/{job_with_steps.pk}/progress/")
    assert "hx-trigger" in progress.content.decode()
    assert "1 of 3 steps done" in progress.content.decode()


def test_a_job_name_from_a_user_is_escaped(researcher_client, job_with_steps):
    RLJob.objects.filter(pk=job_with_steps.pk).update(name="<script>alert(1)</script>")
    for url in ("/training/rl/", f"/training/rl/{job_with_steps.pk}/"):
        page = researcher_client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_job_list_costs_the_same_queries_for_one_job_or_many(
    researcher_client,
    policy,
    weights_dir,
    django_assert_num_queries,
):
    for _ in range(30):
        job_create(factories.demo_benchmark(), policy, weights_dir)
    with django_assert_num_queries(LOGIN_QUERIES + 2):  # the count and one page of rows
        response = researcher_client.get("/training/rl/")
    assert response.content.decode().count('href="/training/rl/') >= 25


# --- API -------------------------------------------------------------------------------------


def test_api_researcher_creates_a_job_and_reads_its_steps(policy, weights_dir):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    data = _launch_data(policy, weights_dir, reward_weights={"turn_penalty": 0.15})
    response = api.post("/api/rl-jobs/", data, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    assert response.json()["status"] == RLJobStatus.QUEUED
    rl_job_advance(job_id=job_id)
    detail = api.get(f"/api/rl-jobs/{job_id}/").json()
    assert [v["number"] for v in detail["versions"]] == [0]
    assert [(s["index"], s["status"]) for s in detail["step_rows"]] == [(0, "rollout")]
    assert detail["reward_weights"] == {"turn_penalty": 0.15}
    cancelled = api.post(f"/api/rl-jobs/{job_id}/cancel/").json()
    assert cancelled["status"] == RLJobStatus.CANCELLED


def test_api_annotator_cannot_launch_ajob_create(policy, weights_dir):
    api = factories.client_for(factories.user("ann", Role.ANNOTATOR))
    data = _launch_data(policy, weights_dir, reward_weights={})
    response = api.post("/api/rl-jobs/", data, format="json")
    assert response.status_code == 403
    assert "researcher" in response.json()["detail"]
    assert api.get("/api/rl-jobs/").status_code == 200


def test_api_bad_settings_answer_400_naming_the_field(policy, weights_dir):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    response = api.post(
        "/api/rl-jobs/",
        _launch_data(policy, weights_dir, group_size=1, reward_weights={}),
        format="json",
    )
    assert response.status_code == 400
    assert response.json() == {"group_size": ["group_size must be between 2 and 64, got 1"]}
    baseline = factories.baseline_policy()
    response = api.post(
        "/api/rl-jobs/", _launch_data(baseline, weights_dir, reward_weights={}), format="json"
    )
    assert response.status_code == 400
    assert "OpenAI-compatible" in response.json()["base_policy"][0]
    assert not RLJob.objects.exists()
