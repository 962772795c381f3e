"""One numbering for people and one name per mechanism.

Samples, turns and calls are numbered from 1 wherever a page says them (the stored and API
integers keep their 0-based values); the episode header counts the turns its strip shows;
and an ablation mechanism has one name on the forms, the matrix page, the CSV and the API
schema, while the reference's older condition names are still accepted on input."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command

from harness_app.harness.ablation import REFERENCE_CONDITIONS, reference_conditions
from tests import factories
from trajectories.models import AblationMatrix, EvaluationRun, MatrixStatus, RolloutBatch, Turn
from trajectories.selectors import evaluations as evaluation_selectors
from trajectories.services.ablations import ablation_matrix_create
from trajectories.services.evaluations import evaluation_create
from trajectories.tasks import ablation_matrix_run_task

pytestmark = pytest.mark.django_db

OLD_NAMES = ("minus_verify", "minus_sentence_compress", "minus_content_dedup")


def _first_two_samples(ran_batch: Any) -> tuple[Any, Any]:
    first, second = ran_batch.episodes.order_by("pk")[:2]
    assert (first.group_id, first.sample_index, second.sample_index) == (second.group_id, 0, 1)
    return first, second


# --- samples ---------------------------------------------------------------------------------


def test_the_viewer_the_compare_picker_and_the_group_call_the_first_sample_sample_1(
    researcher_client, ran_batch
) -> None:
    first, second = _first_two_samples(ran_batch)
    viewer = researcher_client.get(f"/episodes/{first.pk}/").content.decode()
    assert "<dt>Sample</dt><dd>1 of 2</dd>" in viewer
    picker = re.search(r'<select id="compare-b".*?</select>', viewer, re.S).group(0)
    assert f'<option value="{second.pk}">' in picker and "sample 2 ·" in picker
    assert "sample 0" not in picker
    group = researcher_client.get(f"/groups/{first.group_id}/").content.decode()
    assert re.search(rf'href="/episodes/{first.pk}/">Sample 1</a>', group)
    assert not re.search(r"[Ss]ample 0\b", group)


# --- turns -----------------------------------------------------------------------------------


def test_the_header_counts_the_turns_the_strip_numbers_and_says_which_do_not_count(
    researcher_client, episode
) -> None:
    """The demo episode takes 9 turns after the start; its last only ends the search, so 8
    count toward max turns (docs/harness.md, "What counts as a turn")."""
    rows = Turn.objects.filter(episode=episode).count()
    taken = rows - 1  # the start is row 0
    assert episode.turns < taken  # the case the header got wrong: "8 / 40" beside 0…9
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    strip = re.search(r'<ol class="turn-strip">.*?</ol>', page, re.S).group(0)
    labels = re.findall(r'class="turn-link[^"]*"[^>]*>([^<]+)</a>', strip)
    assert labels == ["start", *map(str, range(1, taken + 1))]
    header = re.search(r"<dt>Turns</dt><dd>(.*?)</dd>", page, re.S).group(1)
    assert re.sub(r"<[^>]+>", "", header).startswith(
        f"{taken} · {episode.turns} counted toward max turns 40"
    )
    uncounted = re.findall(r'data-turn="(\d+)" class="turn-link[^"]*\buncounted\b', strip)
    assert len(uncounted) == taken - episode.turns
    assert f'data-turn="{taken}" class="turn-link' in strip and str(taken) in uncounted
    # The budget line says the count the model saw, not the step number.
    last_panel = page[page.index(f'aria-label="Curated set after turn {taken}"') :]
    assert f"Budget: turn {episode.turns}/40" in last_panel[:4000]
    assert '<h2 id="turn-0-h">The start' in page


# --- model calls -----------------------------------------------------------------------------


def test_calls_are_numbered_from_1_in_the_viewer_its_token_strip_and_its_prompt(
    researcher_client, episode, new_model_call
) -> None:
    for turn in (1, 1, 2):
        new_model_call(episode, turn_index=turn)
    viewer = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert re.findall(r'title="model call id \d+">call (\d+)<', viewer) == ["1", "2", "3"]
    strips = researcher_client.get(f"/episodes/{episode.pk}/turns/2/tokens/").content.decode()
    assert re.findall(r'title="model call id \d+">call (\d+)<', strips) == ["3"]
    prompts = researcher_client.get(f"/episodes/{episode.pk}/turns/1/prompt/").content.decode()
    assert re.findall(r'title="model call id \d+">call (\d+)<', prompts) == ["1", "2"]


# --- one name per mechanism ------------------------------------------------------------------


def test_conditions_are_named_after_their_mechanism_and_old_names_still_work() -> None:
    assert "minus_verification" in REFERENCE_CONDITIONS
    assert not set(OLD_NAMES) & set(REFERENCE_CONDITIONS)
    named = reference_conditions(["minus_verify", "minus_sentence_compress", "full"])
    assert [(name, a.disabled) for name, a in named] == [
        ("minus_verification", ("verification",)),
        ("minus_compression", ("compression",)),
        ("full", ()),
    ]


def test_the_launch_forms_name_each_mechanism_as_the_batches_do(researcher_client) -> None:
    batch_form = researcher_client.get("/batches/new/").content.decode()
    matrix_form = researcher_client.get("/ablations/new/").content.decode()
    evaluation_form = researcher_client.get("/evaluations/new/").content.decode()
    for mechanism in ("verification", "auto_seed", "compression", "dedup"):
        assert re.search(rf'value="{mechanism}"[^>]*>\s*{mechanism}\s*</label>', batch_form)
    for form in (matrix_form, evaluation_form):
        assert re.search(r'value="minus_verification"[^>]*>\s*minus_verification\s*</label>', form)
        for old in (*OLD_NAMES, "auto seed"):
            assert old not in form


def test_the_matrix_page_its_csv_and_the_api_say_the_one_name(
    researcher_client, researcher_api, demo_benchmark, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks():
        matrix = ablation_matrix_create(
            benchmark=demo_benchmark, runs=1, query_limit=1, conditions=["full", "minus_verify"]
        )
    assert matrix.conditions == ["full", "minus_verification"]  # stored by the one name
    ablation_matrix_run_task(matrix.pk)
    matrix.refresh_from_db()
    assert matrix.status == MatrixStatus.DONE, matrix.error
    page = researcher_client.get(f"/ablations/{matrix.pk}/").content.decode()
    csv_text = researcher_client.get(f"/ablations/{matrix.pk}/matrix.csv").content.decode()
    answer = researcher_api.get(f"/api/ablation-matrices/{matrix.pk}/").json()
    for text in (page, csv_text, str(answer)):
        assert "minus_verification" in text and "minus_verify" not in text

    schema = researcher_api.get("/api/schema/", {"format": "json"}).json()
    enums = re.findall(r"'enum': \[([^\]]*minus_[^\]]*)\]", str(schema))
    assert enums and all("'minus_verification'" in e for e in enums)
    assert not any(old in str(schema) for old in OLD_NAMES)

    created = researcher_api.post(
        "/api/ablation-matrices/",
        {"benchmark": demo_benchmark.pk, "conditions": ["minus_content_dedup"], "runs": 1},
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["conditions"] == ["minus_dedup"]
    assert AblationMatrix.objects.get(pk=created.json()["id"]).conditions == ["minus_dedup"]


def test_old_condition_names_are_accepted_by_the_evaluation_form_api_and_command(
    researcher_client, researcher_api, demo_benchmark, baseline_policy, capsys
) -> None:
    form = {
        "benchmarks": [demo_benchmark.pk],
        "policies": [baseline_policy.pk],
        "conditions": ["minus_sentence_compress"],
        "runs": 1,
        "query_limit": 1,
        "max_turns": 40,
    }
    assert researcher_client.post("/evaluations/new/", form).status_code == 302
    api = researcher_api.post(
        "/api/evaluation-runs/", {**form, "conditions": ["minus_verify", "full"]}, format="json"
    )
    assert api.status_code == 201, api.json()
    call_command(
        "run_evaluation",
        "--benchmark", demo_benchmark.name,
        "--policy", baseline_policy.name,
        "--conditions", "minus_content_dedup",
        "--runs", "1",
        "--limit", "1",
    )  # fmt: skip
    stored = list(EvaluationRun.objects.order_by("pk").values_list("conditions", flat=True))
    assert stored == [["minus_compression"], ["minus_verification", "full"], ["minus_dedup"]]


def test_the_migration_renames_stored_conditions(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks():
        matrix = ablation_matrix_create(benchmark=demo_benchmark, conditions=["minus_verify"])
        evaluation = EvaluationRun.objects.create(conditions=["full", "minus_content_dedup"])
    AblationMatrix.objects.filter(pk=matrix.pk).update(
        conditions=["minus_verify"], result={"conditions": [{"condition": "minus_verify", "n": 1}]}
    )
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=1)
    RolloutBatch.objects.filter(pk=batch.pk).update(
        evaluation=evaluation, evaluation_condition="minus_sentence_compress"
    )
    migration = importlib.import_module(
        "trajectories.migrations.0016_failed_metrics_null_and_condition_names"
    )
    migration.condition_names_one(apps, None)
    matrix.refresh_from_db()
    evaluation.refresh_from_db()
    batch.refresh_from_db()
    assert matrix.conditions == ["minus_verification"]
    assert matrix.result["conditions"] == [{"condition": "minus_verification", "n": 1}]
    assert evaluation.conditions == ["full", "minus_dedup"]
    assert batch.evaluation_condition == "minus_compression"


def test_a_comparison_link_with_an_old_condition_name_still_answers(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks():
        evaluation = evaluation_create(
            benchmarks=[demo_benchmark],
            policies=[baseline_policy],
            conditions=["full", "minus_verify"],
            runs=1,
            query_limit=1,
        )
    pk = baseline_policy.pk
    answer = evaluation_selectors.evaluation_compare(
        evaluation=evaluation, a=f"{pk}:full", b=f"{pk}:minus_verify"
    )
    assert answer["b"] == {
        "key": f"{pk}:minus_verification",
        "label": "baseline · minus_verification",
    }
