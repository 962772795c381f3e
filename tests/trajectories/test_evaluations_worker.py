"""An evaluation run end to end: launched by the `run_evaluation` command, its batches run by
a real Celery worker, read back as a table of two configurations x 3 runs and a comparison."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from harness_app.models import PolicyConfig, PolicyKind
from tests.vllm import VLLM_URL, needs_vllm
from tests.workers import wait_until
from trajectories.models import Episode, EvaluationRun, EvaluationStatus
from trajectories.selectors import evaluations as selectors
from trajectories.services.evaluations import evaluation_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_command_waits_for_the_worker_and_prints_two_configurations_by_three_runs(
    live_worker, demo_benchmark, baseline_policy
):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "run_evaluation",
        "--benchmark", "demo",
        "--policy", "baseline",
        "--conditions", "full", "all_harness_mechanisms_disabled",
        "--limit", "3",
        "--wait", "--timeout", "300", "--json",
        stdout=out,
        stderr=err,
    )  # fmt: skip
    result = json.loads(out.getvalue())
    assert result["progress"]["status"] == EvaluationStatus.DONE, live_worker.log()[-3000:]
    assert result["progress"]["episodes_completed"] == 2 * 3 * 3
    assert result["progress"]["batches_finished"] == 6
    rows = result["table"]["rows"]
    assert [r["config"] for r in rows] == [
        "baseline · full",
        "baseline · all_harness_mechanisms_disabled",
    ]
    assert all((r["runs"], r["n"], r["failed"]) == (3, 3, 0) for r in rows)
    full, bare = (r["values"]["curated_recall"] for r in rows)
    # the baseline is deterministic: its three runs agree, so the std over runs is 0
    assert full["std"] == 0.0 and bare["std"] == 0.0
    assert full["mean"] > 0

    evaluation = EvaluationRun.objects.get(pk=result["evaluation"])
    a, b = (c["key"] for c in result["configs"])
    compared = selectors.evaluation_compare(evaluation=evaluation, a=a, b=b)["comparison"]
    assert compared["n"] == 3
    assert compared["mean_difference"] == pytest.approx(bare["mean"] - full["mean"], abs=1e-3)
    assert compared["ci_low"] <= compared["mean_difference"] <= compared["ci_high"]
    transfer = selectors.evaluation_transfer(evaluation=evaluation)
    assert [c["mean"] for c in transfer["rows"][0]["cells"]] == [full["mean"], bare["mean"]]


def test_the_command_names_what_it_cannot_find(demo_benchmark, baseline_policy):
    with pytest.raises(CommandError, match="no policy config named 'gpt' \\(known: baseline\\)"):
        call_command("run_evaluation", "--benchmark", "demo", "--policy", "gpt")
    with pytest.raises(CommandError, match="runs: runs must be between 1 and 20"):
        call_command("run_evaluation", "--benchmark", "demo", "--policy", "baseline", "--runs", "0")
    assert not EvaluationRun.objects.exists()


@needs_vllm
def test_baseline_and_a_real_vllm_policy_run_side_by_side_on_their_own_queues(
    live_worker, demo_benchmark, baseline_policy, served_model
):
    model = PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=VLLM_URL,
        model=served_model,
        tool_call_format="json_schema",
        sampling={"temperature": 1.0, "max_tokens": 96, "seed": 7},
    )
    evaluation = evaluation_create(
        benchmarks=[demo_benchmark],
        policies=[baseline_policy, model],
        runs=2,
        query_limit=1,
        max_turns=2,
    )

    def finished() -> bool:
        evaluation.refresh_from_db()
        return evaluation.is_finished

    wait_until(finished, timeout=600, what=f"evaluation run\n{live_worker.log()[-3000:]}")
    assert evaluation.status == EvaluationStatus.DONE
    rows = {r["config"]: r for r in selectors.evaluation_table(evaluation=evaluation)["rows"]}
    assert set(rows) == {"baseline · full", "smollm2 · full"}
    errors = list(
        Episode.objects.filter(batch__evaluation=evaluation, status="failed").values_list(
            "termination_reason", "error"
        )
    )
    assert rows["smollm2 · full"]["failed"] == 0, errors
    assert all((r["runs"], r["n"]) == (2, 1) for r in rows.values())
    configs = selectors.evaluation_configs(evaluation=evaluation)
    compared = selectors.evaluation_compare(
        evaluation=evaluation, a=configs[0].key, b=configs[1].key
    )["comparison"]
    assert compared["n"] == 1
