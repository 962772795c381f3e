"""Evaluation runs: the service's batches, finishing and cancelling, and the selector's
mean ± std table, paired comparison and transfer table on constructed episodes."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from harness_app import queues
from harness_app.models import Benchmark, PolicyConfig, PolicyKind
from harness_app.services.benchmarks import benchmark_import
from tests.paths import DEMO_DIR
from trajectories.models import (
    BatchStatus,
    Episode,
    EpisodeStatus,
    EvaluationRun,
    EvaluationStatus,
    RolloutBatch,
)
from trajectories.rollout import episode_run
from trajectories.selectors import evaluations as selectors
from trajectories.services.evaluations import (
    EvaluationParameterError,
    evaluation_cancel,
    evaluation_create,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def second_policy(db: None) -> PolicyConfig:
    return PolicyConfig.objects.create(name="baseline-b", kind=PolicyKind.BASELINE)


@pytest.fixture
def second_benchmark(db: None) -> Benchmark:
    result = benchmark_import(path=DEMO_DIR, name="demo-b", fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


def _created(capture: Any, **kwargs: Any) -> EvaluationRun:
    with capture():  # episodes are sent on commit; these tests set results themselves
        return evaluation_create(**kwargs)


def test_one_batch_per_cell_and_run_all_queued_on_commit(
    demo_benchmark,
    second_benchmark,
    baseline_policy,
    second_policy,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    sent: list[tuple[str, int, str]] = []
    monkeypatch.setattr(
        queues, "enqueue", lambda name, pk, queue=None: sent.append((name, pk, queue))
    )
    with django_capture_on_commit_callbacks(execute=True):
        evaluation = evaluation_create(
            benchmarks=[demo_benchmark, second_benchmark],
            policies=[baseline_policy, second_policy],
            conditions=["full", "minus_verify"],
            runs=3,
            query_limit=2,
        )
        assert sent == []  # nothing reaches the broker before the rows are committed
    batches = RolloutBatch.objects.filter(evaluation=evaluation)
    assert batches.count() == 2 * 2 * 2 * 3
    cells = set(
        batches.values_list(
            "benchmark_id", "policy_id", "evaluation_condition", "evaluation_run_index"
        )
    )
    assert len(cells) == 24
    assert {c[3] for c in cells} == {0, 1, 2}
    verify_off = batches.filter(evaluation_condition="minus_verification").first()
    assert verify_off is not None and verify_off.ablation["verification"] is False
    assert all(b.episodes_total == 2 and b.samples_per_query == 1 for b in batches)
    assert len(sent) == 48 and {q for _, _, q in sent} == {queues.ROLLOUTS}
    # every batch of a benchmark runs the same queries: the comparison pairs them
    per_batch = {
        b.pk: set(b.episodes.values_list("query_id", flat=True))
        for b in batches.filter(benchmark=demo_benchmark)
    }
    assert len({frozenset(q) for q in per_batch.values()}) == 1
    assert evaluation.status == EvaluationStatus.RUNNING
    assert selectors.evaluation_progress(evaluation=evaluation)["episodes_total"] == 48


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"conditions": ["full", "minus_magic"]}, "conditions", "unknown condition"),
        ({"conditions": []}, "conditions", "at least one"),
        ({"runs": 0}, "runs", "runs must be between 1 and 20"),
        ({"max_turns": 0}, "max_turns", "max_turns must be between"),
        ({"policies": []}, "policies", "at least one"),
        ({"query_limit": 0}, "query_limit", "query_limit must be between"),
    ],
)
def test_a_refused_request_names_its_field_and_writes_nothing(
    demo_benchmark, baseline_policy, kwargs, field, message
):
    request = {"benchmarks": [demo_benchmark], "policies": [baseline_policy], **kwargs}
    with pytest.raises(EvaluationParameterError, match=message) as caught:
        evaluation_create(**request)
    assert caught.value.field == field
    assert EvaluationRun.objects.count() == 0 and RolloutBatch.objects.count() == 0


def test_the_run_is_done_when_its_last_batch_finishes(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    evaluation = _created(
        django_capture_on_commit_callbacks,
        benchmarks=[demo_benchmark],
        policies=[baseline_policy],
        runs=2,
        query_limit=1,
    )
    first, second = evaluation.batches.order_by("pk").values_list("pk", flat=True)
    for episode in Episode.objects.filter(batch_id=first):
        episode_run(episode_id=episode.pk)
    evaluation.refresh_from_db()
    assert evaluation.status == EvaluationStatus.RUNNING
    for episode in Episode.objects.filter(batch_id=second):
        episode_run(episode_id=episode.pk)
    evaluation.refresh_from_db()
    assert evaluation.status == EvaluationStatus.DONE and evaluation.finished_at
    progress = selectors.evaluation_progress(evaluation=evaluation)
    assert (progress["batches_finished"], progress["episodes_completed"]) == (2, 2)
    assert progress["progress"] == 1.0


def test_cancel_stops_every_batch(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    evaluation = _created(
        django_capture_on_commit_callbacks,
        benchmarks=[demo_benchmark],
        policies=[baseline_policy],
        runs=3,
        query_limit=2,
    )
    assert evaluation_cancel(evaluation=evaluation) == 6
    evaluation.refresh_from_db()
    assert evaluation.status == EvaluationStatus.CANCELLED
    assert set(evaluation.batches.values_list("status", flat=True)) == {BatchStatus.CANCELLED}
    assert evaluation_cancel(evaluation=evaluation) == 0


# --- the tables, on constructed results ------------------------------------------------------

# curated recall of (policy, run) per query: A is flat, B beats A by 0.2 on every query
A_RUNS = [[0.2, 0.4, 0.6], [0.4, 0.4, 0.4], [0.6, 0.4, 0.2]]
B_RUNS = [[0.4, 0.6, 0.8], [0.6, 0.6, 0.6], [0.8, 0.6, 0.4]]


@pytest.fixture
def constructed(
    demo_benchmark, baseline_policy, second_policy, django_capture_on_commit_callbacks
) -> EvaluationRun:
    evaluation = _created(
        django_capture_on_commit_callbacks,
        benchmarks=[demo_benchmark],
        policies=[baseline_policy, second_policy],
        runs=3,
        query_limit=3,
    )
    for policy, runs in ((baseline_policy, A_RUNS), (second_policy, B_RUNS)):
        for run_index, recalls in enumerate(runs):
            batch = evaluation.batches.get(policy=policy, evaluation_run_index=run_index)
            episodes = batch.episodes.order_by("query_id")
            for episode, recall in zip(episodes, recalls, strict=True):
                Episode.objects.filter(pk=episode.pk).update(
                    status=EpisodeStatus.COMPLETED,
                    curated_recall=recall,
                    reward=recall * 2,
                    turns=run_index + 1,
                    metrics={"answer_em": 1.0 if recall > 0.5 else 0.0},
                )
    return evaluation


def _key(policy: PolicyConfig) -> str:
    return f"{policy.pk}:full"


def test_the_table_reports_mean_and_std_over_runs_per_configuration(
    constructed, baseline_policy, second_policy
):
    table = selectors.evaluation_table(evaluation=constructed)
    assert "answer_em" in table["metrics"] and "answer_f1" not in table["metrics"]
    rows = {row["config"]: row for row in table["rows"]}
    assert set(rows) == {"baseline · full", "baseline-b · full"}
    a, b = rows["baseline · full"], rows["baseline-b · full"]
    assert (a["runs"], a["n"], b["runs"], b["n"]) == (3, 3, 3, 3)
    # every run of A averages 0.4, so its std over runs is 0; B's runs average 0.6
    assert a["values"]["curated_recall"] == {"mean": 0.4, "std": 0.0, "runs": 3}
    assert b["values"]["curated_recall"]["mean"] == pytest.approx(0.6)
    assert a["values"]["turns"]["mean"] == 2.0
    assert a["values"]["turns"]["std"] == pytest.approx(0.8165, abs=1e-4)  # pstdev of 1, 2, 3
    # answer_em: A's runs score 1/3, 0, 1/3 of their queries
    assert a["values"]["answer_em"]["mean"] == pytest.approx(0.2222, abs=1e-4)
    column = table["metrics"].index("curated_recall")
    assert a["cells"][column] == "0.400 ± 0.000"


def test_the_paired_comparison_pairs_queries_and_brackets_the_true_difference(
    constructed, baseline_policy, second_policy
):
    a, b = _key(baseline_policy), _key(second_policy)
    result = selectors.evaluation_compare(evaluation=constructed, a=a, b=b)
    comparison = result["comparison"]
    assert comparison["n"] == 3 and comparison["wins"] == 3
    assert comparison["mean_difference"] == pytest.approx(0.2)
    assert comparison["ci_low"] == pytest.approx(0.2) and comparison["ci_high"] == pytest.approx(
        0.2
    )
    assert selectors.evaluation_compare(evaluation=constructed, a=a, b=b) == result
    reverse = selectors.evaluation_compare(evaluation=constructed, a=b, b=a, metric="reward")
    assert reverse["comparison"]["mean_difference"] == pytest.approx(-0.4)
    with pytest.raises(selectors.EvaluationQueryError, match="not a configuration") as caught:
        selectors.evaluation_compare(evaluation=constructed, a=a, b="999:full")
    assert caught.value.field == "b"
    with pytest.raises(selectors.EvaluationQueryError) as caught:
        selectors.evaluation_compare(evaluation=constructed, a=a, b=b, metric="vibes")
    assert caught.value.field == "metric"


def test_the_transfer_table_csv_and_chart(constructed, demo_benchmark):
    transfer = selectors.evaluation_transfer(evaluation=constructed)
    assert [c["label"] for c in transfer["configs"]] == ["baseline · full", "baseline-b · full"]
    assert [r["benchmark"] for r in transfer["rows"]] == ["demo"]
    rows = list(csv.reader(io.StringIO(selectors.transfer_csv(transfer))))
    assert rows[0] == [
        "benchmark",
        "baseline · full mean",
        "baseline · full std",
        "baseline-b · full mean",
        "baseline-b · full std",
    ]
    assert rows[1] == ["demo", "0.4000", "0.0000", "0.6000", "0.0000"]
    chart = selectors.transfer_chart(transfer)
    assert chart["groups"] == ["demo"]
    assert [s["mean"] for s in chart["charts"][0]["series"]] == [[0.4], [0.6]]
