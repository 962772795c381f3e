"""Teacher batches: a hosted OpenAI-compatible teacher without token ids, the filter rule
saved with the batch, and the annotation queue that only takes passing episodes."""

from __future__ import annotations

import json

import pytest
from django.test import TestCase

from harness_app.models import PolicyConfig, PolicyKind, ToolCallFormat
from tests.fakes.openai_server import FakeOpenAIServer
from training.sft.records import records_render, rows_load
from trajectories.models import Episode, EpisodeStatus, ModelCall
from trajectories.rollout import episode_run
from trajectories.selectors.batches import teacher_summary
from trajectories.services.annotations import annotation_label, annotation_next
from trajectories.services.rollouts import BatchParameterError, batch_create
from trajectories.teacher_rule import (
    TeacherRuleError,
    clause_label,
    teacher_rule_clean,
    teacher_rule_failures,
)

SEARCH = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
END = {"tool": "end_search", "arguments": {}}
KEY = "sk-teacher-secret-4242"

# --- the rule, checked and applied ------------------------------------------------------------


def test_a_rule_is_cleaned_to_typed_clauses_and_empty_clauses_are_dropped():
    raw = {
        "curated_recall_min": "0.5",
        "final_answer_recall_min": "",
        "format_errors_max": "0",
        "turns_max": 12,
        "termination_reasons": "end_search, max_turns",
    }
    assert teacher_rule_clean(raw) == {
        "curated_recall_min": 0.5,
        "format_errors_max": 0,
        "turns_max": 12,
        "termination_reasons": ["end_search", "max_turns"],
    }


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ({"curated_recall_min": 1.5}, "curated_recall_min", "between 0 and 1, got 1.5"),
        ({"final_answer_recall_min": "high"}, "final_answer_recall_min", "expected a number"),
        ({"turns_max": 0}, "turns_max", "at least 1, got 0"),
        ({"format_errors_max": -1}, "format_errors_max", "at least 0, got -1"),
        ({"format_errors_max": 1.5}, "format_errors_max", "expected a whole number"),
        ({"termination_reasons": ["model_timeout"]}, "termination_reasons", "model_timeout"),
        ({"reward_min": 0.3}, "reward_min", "unknown clause"),
    ],
)
def test_a_bad_clause_is_refused_naming_its_field(raw, field, message):
    with pytest.raises(TeacherRuleError, match=message) as caught:
        teacher_rule_clean(raw)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_the_rule_lists_every_clause_an_episode_fails():
    rule = teacher_rule_clean(
        {
            "curated_recall_min": 0.5,
            "final_answer_recall_min": 0.4,
            "format_errors_max": 0,
            "turns_max": 10,
            "termination_reasons": ["end_search"],
        }
    )
    good = {
        "curated_recall": 0.5,
        "final_answer_recall": 0.9,
        "format_errors": 0,
        "turns": 10,
        "termination_reason": "end_search",
    }
    assert teacher_rule_failures(rule, good) == []
    bad = {**good, "curated_recall": 0.49, "format_errors": 1, "termination_reason": "max_turns"}
    assert teacher_rule_failures(rule, bad) == [
        "curated_recall_min",
        "format_errors_max",
        "termination_reasons",
    ]
    # A recall never measured does not meet its clause.
    assert teacher_rule_failures(rule, {**good, "final_answer_recall": None}) == [
        "final_answer_recall_min"
    ]
    assert clause_label("curated_recall_min", rule) == "curated recall ≥ 0.5"
    assert clause_label("turns_max", rule) == "turns ≤ 10"


def test_a_batch_with_a_bad_rule_is_refused_on_the_rule(demo_benchmark, baseline_policy):
    with pytest.raises(BatchParameterError, match="curated_recall_min") as caught:
        batch_create(
            benchmark=demo_benchmark,
            policy=baseline_policy,
            teacher_rule={"curated_recall_min": 2},
        )
    assert caught.value.field == "teacher_rule"


# --- a hosted teacher: plain chat completions, no token ids ----------------------------------


def _teacher(base_url: str) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="hosted-teacher",
        kind=PolicyKind.OPENAI,
        base_url=base_url,
        model="teacher-model",
        # Replies are one JSON action in the content, as a hosted model answers under
        # response_format.
        tool_call_format=ToolCallFormat.JSON_SCHEMA,
    )


def _ends_on(query_text: str):
    """Replies ending the episode at once on that query, searching forever on the others."""

    def reply(n: int, body: dict) -> str:
        said = " ".join(str(m.get("content")) for m in body.get("messages") or [])
        return json.dumps(END if query_text in said else SEARCH)

    return reply


def _teacher_batch(benchmark, base_url: str, **extra):
    with TestCase.captureOnCommitCallbacks():
        batch = batch_create(
            benchmark=benchmark,
            policy=_teacher(base_url),
            query_limit=3,
            max_turns=2,
            capture_tokens=False,
            **extra,
        )
    for pk in batch.episodes.order_by("pk").values_list("pk", flat=True):
        episode_run(episode_id=pk)
    batch.refresh_from_db()
    return batch


def test_a_teacher_without_token_ids_records_its_episodes_and_gets_the_key(
    demo_benchmark, settings, researcher_client
):
    with FakeOpenAIServer(actions=[SEARCH, END]) as fake:
        settings.TEACHER_BASE_URL = fake.base_url
        settings.TEACHER_API_KEY = KEY
        settings.VLLM_API_KEY = "sk-vllm"
        batch = _teacher_batch(demo_benchmark, fake.base_url, teacher_rule={})
    assert batch.episodes_completed == 3 and batch.episodes_failed == 0
    # Plain chat completions that never asked for token ids, sent with the teacher's key.
    assert fake.requests and all("return_token_ids" not in r["body"] for r in fake.requests)
    assert all("messages" in r["body"] for r in fake.requests)
    assert set(fake.authorizations) == {f"Bearer {KEY}"}
    calls = ModelCall.objects.filter(episode__batch=batch, error="")
    assert set(calls.values_list("episode_id", flat=True)) == set(
        batch.episodes.values_list("pk", flat=True)
    )
    for call in calls:
        assert call.prompt_token_ids == [] and call.completion_token_ids == []
        assert call.completion_logprobs == []
    # The SFT chat export falls back to the conversation itself (the trainer renders it with
    # the student's chat template): the last request's messages plus the final reply.
    chat = list(records_render(rows_load(list(batch.episodes.all()), fmt="chat"), fmt="chat"))
    assert [rendered.how for _, rendered in chat] == ["request_messages"] * 3
    for _, rendered in chat:
        (record,) = rendered.records
        assert record["messages"][-1]["content"] == json.dumps(END)
    # The token export has nothing to train on and says so, episode by episode.
    tokens = list(records_render(rows_load(list(batch.episodes.all()), fmt="tokens"), fmt="tokens"))
    assert [(rendered.how, rendered.records) for _, rendered in tokens] == [
        ("skipped:no_token_ids", [])
    ] * 3
    # The viewer shows such an episode, token page included, without tokens to draw.
    episode = batch.episodes.order_by("pk").first()
    assert researcher_client.get(f"/episodes/{episode.pk}/").status_code == 200
    assert researcher_client.get(f"/episodes/{episode.pk}/turns/0/tokens/").status_code == 200
    # The key lives in settings only, never in the batch's or the policy's record.
    assert KEY not in json.dumps(
        list(type(batch).objects.filter(pk=batch.pk).values()), default=str
    )
    assert KEY not in json.dumps(list(PolicyConfig.objects.values()), default=str)


def test_passing_episodes_enter_the_queue_and_failing_ones_stay_out(
    demo_benchmark, settings, annotator, researcher
):
    first = demo_benchmark.queries.order_by("pk").first()
    rule = {"termination_reasons": ["end_search"], "turns_max": 2}
    with FakeOpenAIServer(reply=_ends_on(first.text)) as fake:
        batch = _teacher_batch(demo_benchmark, fake.base_url, teacher_rule=rule)
    episodes = {e.query_id: e for e in batch.episodes.all()}
    assert {e.status for e in episodes.values()} == {EpisodeStatus.COMPLETED}
    passed = episodes.pop(first.pk)
    assert (passed.teacher_passed, passed.teacher_failures) == (True, [])
    assert {e.termination_reason for e in episodes.values()} == {"max_turns"}
    assert all(e.teacher_passed is False for e in episodes.values())
    assert all(e.teacher_failures == ["termination_reasons"] for e in episodes.values())

    summary = teacher_summary(batch=batch)
    assert summary is not None
    assert (summary["passed"], summary["failed"]) == (1, 2)
    assert [(c["clause"], c["failed"]) for c in summary["clauses"]] == [
        ("turns_max", 0),
        ("termination_reasons", 2),
    ]

    # The annotator is handed the passing episode, and then nothing: the failures are kept
    # (they stay in the batch) but never queued.
    given = annotation_next(annotator=annotator)
    assert given is not None and given.episode.pk == passed.pk
    annotation_label(annotator=annotator, episode=given.episode, label="approve")
    assert annotation_next(annotator=annotator) is None
    assert annotation_next(annotator=researcher) is None
    assert Episode.objects.filter(batch=batch).count() == 3


def test_an_ordinary_batch_is_not_judged_and_stays_in_the_queue(batch_of, annotator):
    batch = batch_of(query_limit=1)
    episode = batch.episodes.get()
    assert (episode.teacher_passed, episode.teacher_failures) == (None, [])
    assert teacher_summary(batch=batch) is None
    given = annotation_next(annotator=annotator)
    assert given is not None and given.episode.pk == episode.pk


# --- the pages and the API -------------------------------------------------------------------


def test_the_launch_form_saves_the_rule_and_the_batch_page_shows_it(
    researcher_client, demo_benchmark, baseline_policy, settings
):
    settings.TEACHER_API_KEY = KEY
    page = researcher_client.get("/batches/new/")
    assert b"Teacher batch" in page.content and KEY.encode() not in page.content
    form = {
        "benchmark": demo_benchmark.pk,
        "policy": baseline_policy.pk,
        "samples_per_query": 1,
        "query_limit": 2,
        "max_turns": 40,
        "termination_policy": "max_turns",
        "teacher": "on",
        "curated_recall_min": "0.5",
        "format_errors_max": "0",
        "termination_reasons": ["end_search"],
    }
    response = researcher_client.post("/batches/new/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    batch = demo_benchmark.rolloutbatch_set.get()
    assert batch.teacher_rule == {
        "curated_recall_min": 0.5,
        "format_errors_max": 0,
        "termination_reasons": ["end_search"],
    }
    detail = researcher_client.get(f"/batches/{batch.pk}/").content.decode()
    assert "Teacher filter rule" in detail and "curated recall ≥ 0.5" in detail
    assert "0</strong> passed" in detail
    assert KEY not in detail


def test_the_launch_form_names_the_bad_rule_field(
    researcher_client, demo_benchmark, baseline_policy
):
    form = {
        "benchmark": demo_benchmark.pk,
        "policy": baseline_policy.pk,
        "samples_per_query": 1,
        "max_turns": 40,
        "termination_policy": "max_turns",
        "teacher": "on",
        "curated_recall_min": "1.5",
    }
    response = researcher_client.post("/batches/new/", form)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "must be between 0 and 1, got 1.5" in errors["curated_recall_min"][0]
    assert not demo_benchmark.rolloutbatch_set.exists()


def test_the_api_takes_and_returns_the_rule_and_never_the_key(
    researcher_api, demo_benchmark, baseline_policy, settings
):
    settings.TEACHER_API_KEY = KEY
    body = {
        "benchmark": demo_benchmark.pk,
        "policy": baseline_policy.pk,
        "query_limit": 1,
        "teacher_rule": {"turns_max": 30, "final_answer_recall_min": 0.25},
    }
    created = researcher_api.post("/api/batches/", body, format="json")
    assert created.status_code == 201, created.json()
    data = created.json()
    assert data["teacher_rule"] == {"turns_max": 30, "final_answer_recall_min": 0.25}
    shown = researcher_api.get(f"/api/batches/{data['id']}/")
    assert shown.json()["summary"]["teacher"]["rule"] == data["teacher_rule"]
    listed = researcher_api.get("/api/batches/")
    assert KEY not in created.content.decode() + shown.content.decode()
    assert KEY not in listed.content.decode()

    bad = researcher_api.post(
        "/api/batches/", {**body, "teacher_rule": {"turns_max": "many"}}, format="json"
    )
    assert bad.status_code == 400
    assert "turns_max" in bad.json()["teacher_rule"][0]


def test_token_capture_can_only_be_switched_off_for_a_model_server(
    researcher_api, demo_benchmark, baseline_policy
):
    body = {"benchmark": demo_benchmark.pk, "policy": baseline_policy.pk, "capture_tokens": False}
    response = researcher_api.post("/api/batches/", body, format="json")
    assert response.status_code == 400
    assert "OpenAI-compatible policy" in response.json()["capture_tokens"][0]
