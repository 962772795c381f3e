"""The SFT job pages and API: who may launch, what a bad request says, what a job shows
(its loss curves and its lineage), and an RL job launched from one."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from harness_app.models import PolicyConfig
from harness_app.roles import Role
from tests import factories
from tests.training_sft.jobs import job_create
from training.models import RLJob, SFTJob, SFTJobStatus
from training.services.sft_jobs import sft_job_run

pytestmark = pytest.mark.django_db

LOGIN_QUERIES = 3  # session, user, the user's groups


@pytest.fixture
def done_job(export, llm_policy, weights_dir, fake_trainer, lora_server) -> SFTJob:
    job = job_create(export, llm_policy, weights_dir)
    done = sft_job_run(job_id=job.pk)
    assert done is not None and done.status == SFTJobStatus.COMPLETED, done and done.error
    return done


def _launch_data(export: Any, policy: PolicyConfig, weights: Any, **extra: Any) -> dict[str, Any]:
    data = {
        "export": export.pk,
        "base_policy": policy.pk,
        "base_model_dir": str(weights),
        "epochs": 3.0,
        "learning_rate": 1e-4,
        "lora_rank": 32,
        "lora_alpha": 64,
        "lora_dropout": 0.0,
        "lora_targets": "q_proj, v_proj",
        "max_length": 2048,
        "batch_size": 1,
        "grad_accum": 2,
        "eval_fraction": 0.1,
        "eval_steps": 10,
        "save_steps": 50,
        "seed": 0,
        "gradient_checkpointing": "",
    }
    return {**data, **extra}


# --- pages -----------------------------------------------------------------------------------


def test_an_annotator_sees_jobs_but_cannot_launch_cancel_or_resume(annotator_client, done_job):
    listing = annotator_client.get("/training/sft/").content.decode()
    assert f'href="/training/sft/{done_job.pk}/"' in listing
    assert "/training/sft/new/" not in listing
    assert annotator_client.get("/training/sft/new/").status_code == 403
    for action in ("cancel", "resume", "serve"):
        assert annotator_client.post(f"/training/sft/{done_job.pk}/{action}/").status_code == 403


def test_the_nav_links_sft_jobs_beside_rl_jobs(researcher_client):
    page = researcher_client.get("/training/rl/").content.decode()
    assert 'href="/training/sft/"' in page


def test_the_launch_form_preselects_an_export_and_creates_a_job(
    researcher_client, export, llm_policy, weights_dir
):
    form = researcher_client.get(f"/training/sft/new/?export={export.pk}").content.decode()
    assert re.search(rf'<option value="{export.pk}" selected>', form)
    response = researcher_client.post(
        "/training/sft/new/", _launch_data(export, llm_policy, weights_dir)
    )
    job = SFTJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/training/sft/{job.pk}/"
    assert (job.lora_targets, job.max_length, job.grad_accum) == (["q_proj", "v_proj"], 2048, 2)
    assert job.gradient_checkpointing is None
    assert job.created_by is not None and job.created_by.username == "rita"


def test_the_launch_form_shows_a_service_refusal_on_its_field(
    researcher_client, export, llm_policy, tmp_path
):
    response = researcher_client.post(
        "/training/sft/new/", _launch_data(export, llm_policy, tmp_path)
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'id="base_model_dir-error">base_model_dir .* has no config.json', page)
    assert not SFTJob.objects.exists()


def test_a_job_page_shows_its_lineage_its_loss_curves_and_its_results(
    researcher_client, done_job, teacher_batch, demo_benchmark, django_assert_num_queries
):
    rl_job = RLJob.objects.create(
        benchmark=demo_benchmark,
        base_policy=done_job.policy,
        base_model_dir=done_job.base_model_dir,
        warm_start=done_job,
    )
    # job (+ export, policies, creator), teacher batches, RL jobs
    with django_assert_num_queries(LOGIN_QUERIES + 3):
        response = researcher_client.get(f"/training/sft/{done_job.pk}/")
    page = response.content.decode()
    lineage = page.split('id="lineage-title"', 1)[1].split("</section>", 1)[0]
    assert f'href="/batches/{teacher_batch.pk}/"' in lineage
    assert f"export {done_job.export_id}" in lineage
    assert f"sft-job-{done_job.pk}" in lineage
    assert f'href="/training/rl/{rl_job.pk}/"' in lineage
    curves = json.loads(re.search(r'id="sft-curves"[^>]*>(.*?)</script>', page, re.S)[1])
    assert curves["steps"] == [0, 1, 2, 3]
    assert curves["loss"] == [None, 2.0, 1.5, 1.0]
    assert curves["eval_loss"] == [2.5, None, None, 1.25]
    assert "2.5000" in page and "1.2500" in page  # eval loss before and after
    assert "the records rendered with the student's chat template" in page
    assert "Serve the adapter again" in page and "Cancel job" not in page
    # The RL job's page says where it started.
    rl_page = researcher_client.get(f"/training/rl/{rl_job.pk}/").content.decode()
    assert (
        f'warm-started from <a href="/training/sft/{done_job.pk}/">SFT job {done_job.pk}</a>'
        in rl_page
    )
    assert f"(export {done_job.export_id})" in rl_page


def test_a_running_job_polls_its_progress_and_offers_cancel(
    researcher_client, export, llm_policy, weights_dir
):
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(
        status=SFTJobStatus.RUNNING, step=3, total_steps=12, history=[{"step": 3, "loss": 1.75}]
    )
    page = researcher_client.get(f"/training/sft/{job.pk}/").content.decode()
    assert "Cancel job" in page and "Resume job" not in page
    progress = researcher_client.get(f"/training/sft/{job.pk}/progress/").content.decode()
    assert "hx-trigger" in progress
    assert "step 3 of 12" in progress and "loss 1.7500" in progress
    response = researcher_client.post(f"/training/sft/{job.pk}/cancel/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.cancel_requested and job.status == SFTJobStatus.RUNNING
    progress = researcher_client.get(f"/training/sft/{job.pk}/progress/").content.decode()
    assert "stopping at the next step" in progress


def test_a_cancelled_job_with_a_checkpoint_resumes_from_its_page(
    researcher_client, export, llm_policy, weights_dir, monkeypatch
):
    from training.services import sft_jobs

    monkeypatch.setattr(sft_jobs.queues, "enqueue", lambda *args, **kwargs: None)
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(
        status=SFTJobStatus.CANCELLED, checkpoint_path="/data/checkpoint-4"
    )
    assert "Resume job" in researcher_client.get(f"/training/sft/{job.pk}/").content.decode()
    researcher_client.post(f"/training/sft/{job.pk}/resume/")
    job.refresh_from_db()
    assert job.status == SFTJobStatus.QUEUED


def test_a_job_name_from_a_user_is_escaped(researcher_client, done_job):
    SFTJob.objects.filter(pk=done_job.pk).update(name="<script>alert(1)</script>")
    for url in ("/training/sft/", f"/training/sft/{done_job.pk}/"):
        page = researcher_client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_job_list_costs_the_same_queries_for_one_job_or_many(
    researcher_client, export, llm_policy, weights_dir, django_assert_num_queries
):
    for _ in range(30):
        job_create(export, llm_policy, weights_dir)
    with django_assert_num_queries(LOGIN_QUERIES + 2):  # the count and one page of rows
        response = researcher_client.get("/training/sft/")
    assert response.content.decode().count('href="/training/sft/') >= 25


def test_the_rl_launch_form_starts_from_an_sft_job(researcher_client, done_job, demo_benchmark):
    form = researcher_client.get("/training/rl/new/").content.decode()
    assert f'<option value="{done_job.pk}">' in form
    data = {
        "benchmark": demo_benchmark.pk,
        "warm_start": done_job.pk,
        "base_model_dir": "/elsewhere",
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
    response = researcher_client.post("/training/rl/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = RLJob.objects.get()
    assert job.warm_start == done_job and job.base_policy == done_job.policy
    assert job.base_model_dir == done_job.base_model_dir and job.lora_rank == 32
    assert job.versions.get(number=0).adapter_path == done_job.adapter_path


# --- API -------------------------------------------------------------------------------------


def _api_data(export: Any, policy: PolicyConfig, weights: Any, **extra: Any) -> dict[str, Any]:
    return {
        "export": export.pk,
        "base_policy": policy.pk,
        "base_model_dir": str(weights),
        "epochs": 1.0,
        **extra,
    }


def test_api_researcher_creates_cancels_and_resumes_a_job(
    export, llm_policy, weights_dir, monkeypatch, django_capture_on_commit_callbacks
):
    from training.services import sft_jobs

    sent: list[tuple] = []
    monkeypatch.setattr(sft_jobs.queues, "enqueue", lambda *args, **kw: sent.append(args))
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/sft-jobs/", _api_data(export, llm_policy, weights_dir), format="json"
        )
    assert response.status_code == 201, response.json()
    body = response.json()
    # LoRA rank: Harness-1's 32, capped by the local server's largest (LLM_MAX_LORA_RANK, 16)
    assert (body["status"], body["epochs"], body["lora_rank"]) == ("queued", 1.0, 16)
    job_id = body["id"]
    assert sent == [("training.tasks.sft_job_run_task", job_id)]
    conflict = api.post(f"/api/sft-jobs/{job_id}/resume/")
    assert (
        conflict.status_code == 409
        and "only a cancelled or failed job" in conflict.json()["detail"]
    )
    assert api.post(f"/api/sft-jobs/{job_id}/cancel/").json()["status"] == "cancelled"
    SFTJob.objects.filter(pk=job_id).update(checkpoint_path="/data/checkpoint-2")
    resumed = api.post(f"/api/sft-jobs/{job_id}/resume/")
    assert resumed.status_code == 200 and resumed.json()["status"] == "queued"
    detail = api.get(f"/api/sft-jobs/{job_id}/").json()
    assert detail["history"] == [] and "manifest" in detail
    assert "history" not in api.get("/api/sft-jobs/").json()["results"][0]


def test_api_a_running_job_is_asked_to_stop(export, llm_policy, weights_dir):
    job = job_create(export, llm_policy, weights_dir)
    SFTJob.objects.filter(pk=job.pk).update(status=SFTJobStatus.RUNNING)
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    body = api.post(f"/api/sft-jobs/{job.pk}/cancel/").json()
    assert (body["status"], body["cancel_requested"]) == ("running", True)


def test_api_annotator_cannot_launch(export, llm_policy, weights_dir):
    api = factories.client_for(factories.user("ann", Role.ANNOTATOR))
    response = api.post("/api/sft-jobs/", _api_data(export, llm_policy, weights_dir), format="json")
    assert response.status_code == 403
    assert api.get("/api/sft-jobs/").status_code == 200


def test_api_refusals_answer_400_naming_the_field(export, llm_policy, weights_dir, baseline_policy):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    response = api.post(
        "/api/sft-jobs/", _api_data(export, llm_policy, weights_dir, lora_rank=0), format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"lora_rank": ["lora_rank must be between 1 and 64, got 0"]}
    response = api.post(
        "/api/sft-jobs/", _api_data(export, baseline_policy, weights_dir), format="json"
    )
    assert response.status_code == 400 and "OpenAI-compatible" in response.json()["base_policy"][0]
    assert not SFTJob.objects.exists()


def test_api_rl_job_warm_starts_from_an_sft_job(done_job, demo_benchmark):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    data = {"benchmark": demo_benchmark.pk, "warm_start": done_job.pk, "group_size": 2}
    response = api.post("/api/rl-jobs/", data, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["warm_start"] == done_job.pk and body["base_policy"] == done_job.policy_id
    missing = api.post("/api/rl-jobs/", {"benchmark": demo_benchmark.pk}, format="json")
    assert missing.status_code == 400
    assert missing.json() == {"base_policy": ["give a base_policy, or a warm_start"]}


def test_an_exported_episode_links_to_training_sft_on_its_export(researcher_client, export):
    episode_id = export.items.values_list("episode_id", flat=True).first()
    page = researcher_client.get(f"/episodes/{episode_id}/").content.decode()
    assert f'href="/training/sft/new/?export={export.pk}"' in page


def test_api_publishes_an_adapter_its_server_refused_once_it_takes_it(
    export, llm_policy, weights_dir, fake_trainer, lora_server
):
    lora_server.refuse = {"load_lora_adapter": 500}
    job = job_create(export, llm_policy, weights_dir)
    sft_job_run(job_id=job.pk)
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    refused = api.post(f"/api/sft-jobs/{job.pk}/publish/")
    assert refused.status_code == 502 and "answered 500" in refused.json()["detail"]
    lora_server.refuse = {}
    page = api.post(f"/api/sft-jobs/{job.pk}/publish/")
    assert page.status_code == 200
    assert (page.json()["status"], page.json()["model"]) == ("completed", f"sft-job-{job.pk}")
    queued = job_create(export, llm_policy, weights_dir)
    assert api.post(f"/api/sft-jobs/{queued.pk}/publish/").status_code == 409
