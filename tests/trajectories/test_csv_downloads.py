"""Every CSV download writes names and question text a spreadsheet would run as a formula
(`=HYPERLINK(…)`) as text, quoted with a leading `'`, and leaves numbers numbers: the
episode list, an ablation matrix, an evaluation's transfer table (page and API)."""

from __future__ import annotations

import csv
import io

import pytest

from harness_app.harness.ablation_matrix import MATRIX_METRICS
from harness_app.models import PolicyConfig, PolicyKind
from trajectories.models import AblationMatrix, Episode, EpisodeStatus, MatrixStatus
from trajectories.services.evaluations import evaluation_create

pytestmark = pytest.mark.django_db

HOSTILE = '=HYPERLINK("http://x","y")'
QUOTED = "'" + HOSTILE


def _rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_the_episode_list_csv_quotes_a_hostile_policy_name_and_question(
    researcher_client, ran_batch
):
    PolicyConfig.objects.filter(pk=ran_batch.policy_id).update(name=HOSTILE)
    episode = ran_batch.episodes.order_by("pk").first()
    assert episode is not None
    type(episode.query).objects.filter(pk=episode.query_id).update(text="-1+" + HOSTILE)
    Episode.objects.filter(pk=episode.pk).update(reward=-0.5)
    response = researcher_client.get("/episodes/download.csv", {"sort": "oldest"})
    rows = _rows(b"".join(response.streaming_content))
    first = next(r for r in rows if int(r["id"]) == episode.pk)
    assert {r["policy"] for r in rows} == {QUOTED}
    assert first["question"] == "'-1+" + HOSTILE
    assert first["reward"] == "-0.5"  # a negative number stays a number


@pytest.fixture
def hostile_evaluation(demo_benchmark, django_capture_on_commit_callbacks):
    policy = PolicyConfig.objects.create(name=HOSTILE, kind=PolicyKind.BASELINE)
    with django_capture_on_commit_callbacks():
        evaluation = evaluation_create(
            benchmarks=[demo_benchmark], policies=[policy], query_limit=1
        )
    Episode.objects.filter(batch__evaluation=evaluation).update(
        status=EpisodeStatus.COMPLETED, curated_recall=0.5, reward=-0.25, turns=3
    )
    return evaluation


def test_the_transfer_csv_page_quotes_a_hostile_policy_name(researcher_client, hostile_evaluation):
    body = researcher_client.get(
        f"/evaluations/{hostile_evaluation.pk}/transfer.csv", {"metric": "reward"}
    ).content
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == ["benchmark", f"{QUOTED} · full mean", f"{QUOTED} · full std"]
    assert rows[1] == ["demo", "-0.2500", "0.0000"]


def test_the_transfer_csv_api_quotes_a_hostile_policy_name(researcher_api, hostile_evaluation):
    body = researcher_api.get(
        f"/api/evaluation-runs/{hostile_evaluation.pk}/transfer-csv/", {"metric": "reward"}
    ).content
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0][1] == f"{QUOTED} · full mean"
    assert rows[1][1] == "-0.2500"


def test_the_ablation_matrix_csv_quotes_a_hostile_condition(researcher_client, demo_benchmark):
    entry: dict[str, object] = {"condition": HOSTILE, "n": 1}
    for metric in MATRIX_METRICS:
        entry[f"{metric}_mean"], entry[f"{metric}_std"] = 0.5, 0.0
    matrix = AblationMatrix.objects.create(
        benchmark=demo_benchmark,
        conditions=[HOSTILE],
        status=MatrixStatus.DONE,
        result={"conditions": [entry]},
    )
    body = researcher_client.get(f"/ablations/{matrix.pk}/matrix.csv").content
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[1][:3] == [QUOTED, "1", "0.5000"]
