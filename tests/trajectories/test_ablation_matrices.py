"""Ablation matrices in the web app: the service and its task, the launch form, the matrix
page with its downloads and plot, and the dashboard's plot of the latest one."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from kombu.exceptions import OperationalError as KombuOperationalError

from harness_app import queues
from harness_app.harness import policies
from harness_app.harness.ablation import REFERENCE_CONDITIONS
from harness_app.harness.cli import main as cli_main
from tests.paths import DEMO_DIR
from trajectories.models import AblationMatrix, MatrixStatus
from trajectories.services import ablations
from trajectories.services.ablations import MatrixParameterError, ablation_matrix_create
from trajectories.tasks import ablation_matrix_run_task

pytestmark = pytest.mark.django_db

ALL = list(REFERENCE_CONDITIONS)
CSV_HEADER = "condition,n,recall,trajectory_recall,final_answer_recall,tool_diversity,turns,errors"


def _run(matrix: AblationMatrix) -> AblationMatrix:
    ablation_matrix_run_task(matrix.pk)
    matrix.refresh_from_db()
    return matrix


def _created(benchmark: Any, capture: Any, **kwargs: Any) -> AblationMatrix:
    with capture():  # the task is sent on commit; tests run it themselves
        return ablation_matrix_create(benchmark=benchmark, **kwargs)


@pytest.fixture
def done_matrix(demo_benchmark, django_capture_on_commit_callbacks) -> AblationMatrix:
    matrix = _created(
        demo_benchmark,
        django_capture_on_commit_callbacks,
        runs=2,
        query_limit=2,
        conditions=["full", "minus_verify", "all_harness_mechanisms_disabled"],
    )
    ablation_matrix_run_task(matrix.pk)
    matrix.refresh_from_db()
    assert matrix.status == MatrixStatus.DONE, matrix.error
    return matrix


def _script_json(page: str, element_id: str) -> Any:
    found = re.search(rf'id="{element_id}" type="application/json">(.*?)</script>', page)
    assert found, f"no {element_id} on the page"
    return json.loads(found.group(1))


# --- the service and the task ---------------------------------------------------------------


def test_a_matrix_is_one_task_on_the_rollouts_queue_sent_on_commit(
    demo_benchmark, django_capture_on_commit_callbacks, monkeypatch
):
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(queues, "enqueue", lambda name, *args, **kw: sent.append((name, *args)))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        matrix = ablation_matrix_create(benchmark=demo_benchmark, runs=3, query_limit=5)
        assert sent == []  # nothing reaches the broker before the row is committed
    assert len(callbacks) == 1
    assert sent == [(queues.ABLATION_MATRIX_RUN, matrix.pk)]
    assert queues.TASK_QUEUES[queues.ABLATION_MATRIX_RUN] == queues.ROLLOUTS
    assert matrix.conditions == ALL  # every reference condition, in the reference's order
    assert matrix.episodes_total == len(ALL) * 3 * 5
    assert (matrix.status, matrix.episodes_done, matrix.result) == (MatrixStatus.QUEUED, 0, {})


def test_the_task_stores_what_the_ablate_command_prints(
    done_matrix, demo_benchmark, capsys, tmp_path
):
    code = cli_main(
        [
            "ablate",
            str(DEMO_DIR),
            "--index-dir",
            str(tmp_path / "idx"),
            "--runs",
            "2",
            "--limit",
            "2",
            "--conditions",
            "full,minus_verify,all_harness_mechanisms_disabled",
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    stored = done_matrix.result
    assert stored["conditions"] == printed["conditions"]
    assert set(stored) == set(printed)
    assert (stored["dataset"], stored["policy"], stored["runs"]) == ("demo", "baseline", 2)
    full = stored["conditions"][0]
    assert (full["condition"], full["n"], full["runs"]) == ("full", 2, 2)
    for metric in ("recall", "trajectory_recall", "final_answer_recall", "tool_diversity"):
        assert f"{metric}_mean" in full and f"{metric}_std" in full
    assert done_matrix.episodes_done == done_matrix.episodes_total == 3 * 2 * 2
    assert done_matrix.started_at and done_matrix.finished_at and done_matrix.error == ""


def test_progress_is_written_to_the_row_as_episodes_finish(
    demo_benchmark, django_capture_on_commit_callbacks, monkeypatch
):
    matrix = _created(
        demo_benchmark, django_capture_on_commit_callbacks, query_limit=3, conditions=["full"]
    )
    seen: list[tuple[str, int]] = []
    real_writer = ablations._progress_writer

    def spying_writer(matrix_id: int) -> Any:
        write = real_writer(matrix_id)

        def spy(done: int, total: int) -> None:
            write(done, total)
            row = AblationMatrix.objects.get(pk=matrix_id)
            seen.append((row.status, row.episodes_done))

        return spy

    monkeypatch.setattr(ablations, "PROGRESS_EVERY_S", 0)
    monkeypatch.setattr(ablations, "_progress_writer", spying_writer)
    _run(matrix)
    assert seen == [("running", 1), ("running", 2), ("running", 3)]
    assert matrix.result["conditions"][0]["n"] == 3


def test_a_crash_mid_run_fails_the_matrix_with_a_message_and_no_result(
    demo_benchmark, django_capture_on_commit_callbacks, monkeypatch
):
    built = []

    def crashing(tools, seed):
        built.append(tools)
        if len(built) == 3:
            raise RuntimeError("policy crashed on episode 3")
        return policies.BaselinePolicy(tools=tools)

    monkeypatch.setitem(policies.POLICY_FACTORIES, "crashing", crashing)
    matrix = _created(
        demo_benchmark, django_capture_on_commit_callbacks, policy="crashing", query_limit=4
    )
    _run(matrix)
    assert matrix.status == MatrixStatus.FAILED
    assert matrix.error == "RuntimeError: policy crashed on episode 3"
    assert matrix.result == {}  # nothing half-written
    assert matrix.finished_at is not None


def test_a_finished_matrix_is_never_run_again(done_matrix):
    before = (done_matrix.result, done_matrix.finished_at)
    assert ablation_matrix_run_task(done_matrix.pk) == "done"
    done_matrix.refresh_from_db()
    assert (done_matrix.result, done_matrix.finished_at) == before
    assert ablation_matrix_run_task(999_999) == "gone"


def test_an_unreachable_broker_fails_the_row_and_runs_nothing(
    demo_benchmark, django_capture_on_commit_callbacks, monkeypatch
):
    def down(*args: Any, **kwargs: Any) -> None:
        raise KombuOperationalError("connection refused")

    monkeypatch.setattr(queues, "enqueue", down)
    with django_capture_on_commit_callbacks(execute=True):
        matrix = ablation_matrix_create(benchmark=demo_benchmark, query_limit=1)
    matrix.refresh_from_db()
    assert matrix.status == MatrixStatus.FAILED
    assert matrix.error.startswith("not queued, the task broker is unreachable")
    assert matrix.episodes_done == 0 and matrix.result == {}


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"runs": 0}, "runs", "runs must be between 1 and 20, got 0"),
        ({"max_turns": 500}, "max_turns", "max_turns must be between 1 and 200, got 500"),
        ({"query_limit": 0}, "query_limit", "query_limit must be between 1 and"),
        ({"conditions": []}, "conditions", "choose at least one condition"),
        ({"conditions": ["minus_magic"]}, "conditions", "unknown condition(s) 'minus_magic'"),
        ({"policy": "gpt"}, "policy", "policy 'gpt' cannot run in-process; choose one of: base"),
        ({"retriever": "splade"}, "retriever", "unknown retriever 'splade'; choose one of: bm25"),
    ],
)
def test_bad_parameters_name_their_field_and_write_nothing(demo_benchmark, kwargs, field, message):
    with pytest.raises(MatrixParameterError, match=re.escape(message)) as raised:
        ablation_matrix_create(benchmark=demo_benchmark, **kwargs)
    assert raised.value.field == field
    assert not AblationMatrix.objects.exists()


def test_a_matrix_searches_with_its_retriever_and_says_so(
    demo_benchmark, django_capture_on_commit_callbacks, monkeypatch, researcher_api
):
    from harness_app import indexes
    from tests.harness.test_dense import WordEncoder

    monkeypatch.setattr(indexes, "default_encoder", WordEncoder)
    opened: list[str] = []
    original = indexes.corpus_searcher

    def spy(corpus: Any, kind: str = "bm25") -> Any:
        opened.append(kind)
        return original(corpus, kind)

    monkeypatch.setattr(indexes, "corpus_searcher", spy)
    with django_capture_on_commit_callbacks():
        response = researcher_api.post(
            "/api/ablation-matrices/",
            {
                "benchmark": demo_benchmark.pk,
                "retriever": "hybrid",
                "query_limit": 1,
                "conditions": ["full"],
            },
            format="json",
        )
    assert response.status_code == 201, response.json()
    assert response.json()["retriever"] == "hybrid"
    matrix = _run(AblationMatrix.objects.get(pk=response.json()["id"]))
    assert matrix.status == MatrixStatus.DONE, matrix.error
    assert opened == ["hybrid"]
    assert matrix.result["retriever"] == "hybrid"
    indexes.corpus_retrievers_forget()
    refused = researcher_api.post(
        "/api/ablation-matrices/",
        {"benchmark": demo_benchmark.pk, "retriever": "splade"},
        format="json",
    )
    assert refused.status_code == 400 and "retriever" in refused.json()


# --- the launch form ------------------------------------------------------------------------


def _form_data(benchmark: Any, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "benchmark": benchmark.pk,
        "policy": "baseline",
        "runs": 2,
        "query_limit": 3,
        "max_turns": 40,
        "retriever": "bm25",
        "conditions": ["minus_verify", "full"],
    }
    return data | overrides


def test_the_form_offers_the_baseline_and_checks_every_condition(researcher_client):
    page = researcher_client.get("/ablations/new/").content.decode()
    assert re.search(r'<option value="baseline"[^>]*selected', page)
    for name in ALL:
        assert re.search(
            rf'<input type="checkbox" name="conditions" value="{name}"[^>]*checked', page
        )


def test_researcher_launches_a_matrix_from_the_form(
    researcher_client, demo_benchmark, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = researcher_client.post("/ablations/new/", _form_data(demo_benchmark))
    matrix = AblationMatrix.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/ablations/{matrix.pk}/"
    assert len(callbacks) == 1
    # the reference's order, and its old name for the condition read as the one name
    assert matrix.conditions == ["full", "minus_verification"]
    assert (matrix.runs, matrix.query_limit, matrix.episodes_total) == (2, 3, 12)
    assert matrix.created_by is not None and matrix.created_by.username == "rita"
    page = researcher_client.get(response["Location"]).content.decode()
    assert "Ablation matrix" in page and "queued: 12 episodes" in page


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"conditions": []}, "conditions", "Choose at least one condition."),
        ({"runs": 0}, "runs", "runs must be between 1 and 20, got 0"),
        ({"runs": ""}, "runs", "This field is required."),
        ({"policy": "oracle"}, "policy", "Select a valid choice. oracle is not one of"),
        ({"conditions": ["full", "minus_magic"]}, "conditions", "minus_magic is not one of"),
    ],
)
def test_bad_form_input_is_shown_on_its_field(
    researcher_client, demo_benchmark, overrides, field, message
):
    response = researcher_client.post("/ablations/new/", _form_data(demo_benchmark, **overrides))
    assert response.status_code == 200
    page = response.content.decode()
    shown = re.search(rf'<span class="error" role="alert" id="{field}-error">(.*?)</span>', page)
    assert shown and message in shown.group(1)
    assert not AblationMatrix.objects.exists()


def test_annotators_cannot_launch(annotator_client, demo_benchmark):
    assert annotator_client.get("/ablations/new/").status_code == 403
    response = annotator_client.post("/ablations/new/", _form_data(demo_benchmark))
    assert response.status_code == 403
    assert not AblationMatrix.objects.exists()


# --- the matrix page, its downloads, the dashboard ------------------------------------------


def test_the_page_shows_mean_and_std_per_condition_and_the_plot_data(annotator_client, done_matrix):
    page = annotator_client.get(f"/ablations/{done_matrix.pk}/").content.decode()
    rows = re.findall(r'<tr><td class="mono">([a-z_]+)</td><td class="num">(\d+)</td>', page)
    assert rows == [
        ("full", "2"),
        ("minus_verification", "2"),
        ("all_harness_mechanisms_disabled", "2"),
    ]
    full = done_matrix.result["conditions"][0]
    assert f"{full['recall_mean']:.3f} ± {full['recall_std']:.3f}" in page
    assert f'href="/ablations/{done_matrix.pk}/matrix.csv"' in page
    assert f'href="/ablations/{done_matrix.pk}/matrix.json"' in page
    chart = _script_json(page, "ablation-chart-data")
    assert chart["conditions"] == ["full", "minus_verification", "all_harness_mechanisms_disabled"]
    recall = chart["charts"][0]["series"][0]
    assert recall["metric"] == "recall"
    assert recall["mean"] == [e["recall_mean"] for e in done_matrix.result["conditions"]]
    assert recall["std"] == [e["recall_std"] for e in done_matrix.result["conditions"]]
    assert 'id="ablation-chart-recall"' in page and 'id="ablation-chart-counts"' in page
    assert "hx-get" not in page  # finished: nothing polls


def test_the_csv_has_the_reference_columns_and_the_json_is_the_stored_result(
    client, researcher, done_matrix
):
    client.force_login(researcher)
    response = client.get(f"/ablations/{done_matrix.pk}/matrix.csv")
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert ",".join(rows[0]) == CSV_HEADER
    full = done_matrix.result["conditions"][0]
    assert rows[1][:2] == ["full", "2"]
    assert float(rows[1][2]) == pytest.approx(full["recall_mean"], abs=1e-4)
    assert [r[0] for r in rows[1:]] == done_matrix.conditions
    data = client.get(f"/ablations/{done_matrix.pk}/matrix.json")
    assert json.loads(data.content) == done_matrix.result


def test_an_unfinished_matrix_polls_and_has_nothing_to_download(
    researcher_client, demo_benchmark, django_capture_on_commit_callbacks
):
    matrix = _created(demo_benchmark, django_capture_on_commit_callbacks, query_limit=1)
    page = researcher_client.get(f"/ablations/{matrix.pk}/").content.decode()
    assert f'hx-get="/ablations/{matrix.pk}/progress/"' in page
    assert "0 of 9 episodes" in page and "ablation-chart-data" not in page
    assert researcher_client.get(f"/ablations/{matrix.pk}/matrix.csv").status_code == 404
    progress = researcher_client.get(f"/ablations/{matrix.pk}/progress/", HTTP_HX_REQUEST="true")
    assert "HX-Refresh" not in progress
    _run(matrix)
    done = researcher_client.get(f"/ablations/{matrix.pk}/progress/", HTTP_HX_REQUEST="true")
    assert done["HX-Refresh"] == "true"  # the page reloads to show the table and plot
    assert "9 of 9 episodes" in done.content.decode()


def test_a_failed_matrix_shows_its_error(
    researcher_client, demo_benchmark, django_capture_on_commit_callbacks, monkeypatch
):
    def no_index(corpus: Any) -> Any:
        raise OSError("the index folder is not writable")

    monkeypatch.setattr("harness_app.indexes.corpus_retriever", no_index)
    matrix = _run(_created(demo_benchmark, django_capture_on_commit_callbacks, query_limit=1))
    page = researcher_client.get(f"/ablations/{matrix.pk}/").content.decode()
    assert "Failed" in page and "OSError: the index folder is not writable" in page
    assert "ablation-chart-data" not in page


def test_the_dashboard_plots_the_latest_finished_matrix(researcher_client, done_matrix):
    page = researcher_client.get("/").content.decode()
    assert f'href="/ablations/{done_matrix.pk}/">matrix #{done_matrix.pk}</a>' in page
    chart = _script_json(page, "ablation-chart-data")
    assert chart["matrix"] == done_matrix.pk
    assert chart["charts"][1]["series"][0]["mean"] == [
        e["tool_diversity_mean"] for e in done_matrix.result["conditions"]
    ]
    assert 'href="/ablations/new/"' in page  # researchers can launch one from here


def test_the_dashboard_without_a_finished_matrix_says_so(annotator_client, demo_benchmark):
    page = annotator_client.get("/").content.decode()
    assert "No finished ablation matrix yet" in page
    assert "ablation-chart-data" not in page
    assert 'href="/ablations/new/"' not in page  # annotators cannot launch


@pytest.mark.parametrize("matrices", [1, 4])
def test_the_dashboard_costs_the_same_queries_for_any_number_of_matrices(
    researcher_client, demo_benchmark, django_assert_num_queries, matrices
):
    for _ in range(matrices):
        ablation_matrix_create(benchmark=demo_benchmark, query_limit=1, conditions=["full"])
    # session, user, groups; batches, per-condition means; recent matrices, latest done
    with django_assert_num_queries(3 + 2 + 2):
        page = researcher_client.get("/").content.decode()
    assert page.count('href="/ablations/') - page.count('href="/ablations/new/') == matrices


def test_a_matrix_whose_worker_died_fails_with_the_reason(
    demo_benchmark, django_capture_on_commit_callbacks
):
    from harness_app import jobs, queues
    from trajectories.models import MatrixStatus

    lost = _created(demo_benchmark, django_capture_on_commit_callbacks, query_limit=1)
    held = _created(demo_benchmark, django_capture_on_commit_callbacks, query_limit=1)
    AblationMatrix.objects.update(status=MatrixStatus.RUNNING)

    in_hand = {(queues.ABLATION_MATRIX_RUN, (held.pk,))}
    assert jobs.recover(in_hand=in_hand)["trajectories.AblationMatrix"] == 1
    lost.refresh_from_db()
    held.refresh_from_db()
    assert lost.status == MatrixStatus.FAILED and lost.error.startswith("worker_lost: ")
    assert lost.finished_at is not None
    assert held.status == MatrixStatus.RUNNING
