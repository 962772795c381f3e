"""The reconstruction strategy on recorded sessions: SFT exports, RL samples, the report."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from harness_app.roles import Role
from tests import factories
from training.models import ExportStatus, RLJob
from training.rl.samples import rl_samples_for_recordings
from training.rl.settings import RLJobError, RLJobSettings
from training.services.exports import ExportError, sft_export_create, sft_export_run
from trajectories.models import ModelCall, RecordingSession, pack_floats, pack_ints
from trajectories.selectors.recording import recording_report, recording_sessions
from trajectories.services.annotations import annotation_bulk_apply
from trajectories.services.recording import recording_session_close, recording_session_create

pytestmark = pytest.mark.django_db

REPLIES = [[100, 101], [102], [103, 104]]  # the sampled tokens of calls 1, 2, 3
SYSTEM = {"role": "system", "content": "You are an outside agent."}


def _call(
    session: RecordingSession,
    turn: int,
    messages: list[Any],
    prompt: list[int],
    completion: list[int],
    agent: str,
) -> None:
    ModelCall.objects.create(
        episode_id=session.episode_id,
        turn_index=turn,
        request={"model": "m", "messages": list(messages), "tools": []},
        response={"choices": [{"message": {"content": f"reply {turn}"}}]},
        prompt_token_ids_blob=pack_ints(prompt),
        completion_token_ids_blob=pack_ints(completion),
        completion_logprobs_blob=pack_floats([-0.5] * len(completion)),
        policy_version="m",
        agent=agent,
        api="chat",
    )


def _record(
    *, turns: int = 3, task: str = "", reward: float = 1.0, subagent: bool = False
) -> RecordingSession:
    """A closed session of a growing conversation, as the proxy stores one: each prompt is
    the one before, its reply and a tool result (token 50 + turn)."""
    session, _ = recording_session_create(user=None, name="cli run", task=task)
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "go"}]
    prompt = [1, 2, 3, 4]
    for turn in range(turns):
        _call(session, turn, messages, prompt, REPLIES[turn], "main")
        messages += [
            {"role": "assistant", "content": f"reply {turn}"},
            {"role": "tool", "content": f"result {turn}"},
        ]
        prompt = [*prompt, *REPLIES[turn], 50 + turn]
    if subagent:
        sub = [{"role": "system", "content": "A subagent."}, {"role": "user", "content": "s"}]
        _call(session, turns, sub, [7, 8], [200], "sub")
    return recording_session_close(session=session, reward=reward)


def _approve_recorded() -> None:
    researcher = factories.user("rita", Role.RESEARCHER)
    annotation_bulk_apply(actor=researcher, filters={"kind": "recorded"}, label="approve")


def _export_lines(reconstruction: str, fmt: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    export = sft_export_create(
        filters={"kind": "recorded"},
        fmt=fmt,
        reconstruction=reconstruction,
        enqueue=False,
    )
    done = sft_export_run(export_id=export.pk)
    assert done is not None and done.status == ExportStatus.DONE, done and done.error
    lines = [json.loads(line) for line in Path(done.file_path).read_text().splitlines()]
    return lines, done.manifest


def _trained(record: dict[str, Any]) -> list[int]:
    return [t for t in record["labels"] if t != -100]


def test_sft_token_export_is_one_record_merged_and_one_per_call_per_request():
    _record(turns=3)
    _approve_recorded()

    merged, manifest = _export_lines("prefix_merge", "tokens")
    assert len(merged) == 1 and _trained(merged[0]) == REPLIES[0] + REPLIES[1] + REPLIES[2]
    assert manifest["reconstruction"] == "prefix_merge"

    per_call, manifest = _export_lines("request", "tokens")  # the old alias
    assert [_trained(r) for r in per_call] == REPLIES
    assert manifest["reconstruction"] == "per_request"
    assert manifest["renderings"] == {"tokens_per_request": 1}
    # Each call's whole prompt is in its record again: the third holds the first reply.
    assert per_call[2]["input_ids"][: len(per_call[0]["input_ids"])] == per_call[0]["input_ids"]


def test_sft_chat_export_per_request_is_one_conversation_per_call():
    _record(turns=3)
    _approve_recorded()
    merged, _ = _export_lines("prefix_merge", "chat")
    per_call, manifest = _export_lines("per_request", "chat")
    assert len(merged) == 1 and len(per_call) == 3
    assert manifest["renderings"] == {"request_messages_per_call": 1}
    assert per_call[2] == merged[0]
    assert [len(r["messages"]) for r in per_call] == [3, 5, 7]


def test_an_unknown_export_strategy_is_refused_by_name():
    with pytest.raises(ExportError, match=r"^reconstruction: unknown reconstruction strategy"):
        sft_export_create(reconstruction="whole", enqueue=False)


def test_rl_samples_for_recordings_honour_the_strategy():
    _record(task="t1", turns=3, reward=1.0)
    _record(task="t1", turns=3, reward=0.0)

    merged = rl_samples_for_recordings(task="t1")
    per_call = rl_samples_for_recordings(task="t1", reconstruction="per_request")
    assert len(merged.sequences) == 2 and len(per_call.sequences) == 6
    first = [s for s in per_call.sequences if s.reward == 1.0]
    assert [s.response_ids for s in first] == REPLIES  # one call's completion each
    assert [s.advantage for s in first] == pytest.approx([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=r"^reconstruction: unknown reconstruction strategy"):
        rl_samples_for_recordings(task="t1", reconstruction="per_call")


def test_an_rl_job_setting_names_the_field_and_is_stored_canonical():
    with pytest.raises(RLJobError, match="unknown reconstruction strategy") as refused:
        RLJobSettings(reconstruction="merged").check()
    assert refused.value.field == "reconstruction"
    RLJobSettings(reconstruction="request").check()  # the alias passes
    assert RLJob._meta.get_field("reconstruction").default == "prefix_merge"


def test_the_report_reads_two_queries_and_compares_the_strategies():
    for _ in range(3):
        _record(task="t1", turns=3, subagent=True)
    _record(task="other", turns=1)

    with CaptureQueriesContext(connection) as queries:
        report = recording_report(sessions=recording_sessions().filter(task="t1"))
    assert len(queries) == 2
    merged, per_call = report.figures["prefix_merge"], report.figures["per_request"]
    assert (report.sessions, report.calls) == (3, 12)
    assert (merged.sequences, per_call.sequences) == (6, 12)  # main chain + subagent, each
    assert merged.breaks == {"first_call": 3, "subagent_start": 3}
    assert merged.trained_tokens == per_call.trained_tokens
    assert per_call.tokens_processed > merged.tokens_processed


def test_the_command_prints_the_table_or_json():
    session = _record(task="t1", turns=3)
    _record(task="other", turns=2)

    out = StringIO()
    call_command("recording_report", "--task", "t1", stdout=out)
    table = out.getvalue()
    assert "1 session(s), 3 call(s)" in table
    assert [line.split()[-1] for line in table.splitlines() if line.startswith("sequences")] == [
        "3.00x"
    ]
    assert "chain breaks (prefix_merge): first_call 1" in table

    out = StringIO()
    call_command("recording_report", "--session", str(session.pk), "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["strategies"]["per_request"]["sequences"] == 3
    assert body["ratios"]["sequences"] == 3.0

    with pytest.raises(CommandError, match="no recording sessions with task 'none'"):
        call_command("recording_report", "--task", "none")
    with pytest.raises(CommandError, match=r"--session: no recording session \[999\]"):
        call_command("recording_report", "--session", "999")
    with pytest.raises(CommandError, match="--substeps must be >= 1"):
        call_command("recording_report", "--substeps", "0")
    with pytest.raises(CommandError, match="--max-sequence-tokens must be >= 2 or None, got 0"):
        call_command("recording_report", "--max-sequence-tokens", "0")


def test_the_report_endpoint_filters_by_task(researcher_api):
    _record(task="t1", turns=2)
    _record(task="t2", turns=3)
    body = researcher_api.get("/api/recordings/report/?task=t2&substeps=4").json()
    assert body["sessions"] == 1 and body["trainer"]["substeps"] == 4
    assert body["strategies"]["per_request"]["optimizer_steps"] == 3
    bad = researcher_api.get("/api/recordings/report/?substeps=x")
    assert bad.status_code == 400 and "substeps" in bad.json()


def test_the_trajectory_endpoint_takes_names_and_aliases(researcher_api):
    session = _record(turns=2)
    url = f"/api/recordings/{session.pk}/trajectory/"
    for mode, chains, name in [("per_request", 2, "per_request"), ("prefix", 1, "prefix_merge")]:
        body = researcher_api.get(f"{url}?mode={mode}").json()
        assert (len(body["chains"]), body["mode"]) == (chains, name)


def _page_queries(researcher_client: Any, episode_id: int) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = researcher_client.get(f"/episodes/{episode_id}/")
    assert response.status_code == 200
    return len(queries), response.content.decode()


def test_the_episode_page_compares_the_strategies_in_pinned_queries(researcher_client):
    small = _record(turns=1)
    large = _record(turns=3, subagent=True)
    small_count, _ = _page_queries(researcher_client, small.episode_id)
    count, html = _page_queries(researcher_client, large.episode_id)
    # Session, user and roles; the episode, its exports, its recording session; the
    # calls' token blobs once (chains and the report), their summaries once.
    assert count == small_count == 8  # no query per call or per chain
    assert "Reconstruction strategies" in html
    # Two chains (main agent, subagent) merged, against four calls one by one.
    assert '<th scope="row">Sequences</th><td>2</td><td>4</td>' in html


def test_the_export_api_takes_the_strategy_and_refuses_an_unknown_one(researcher_api, approved):
    # `approved`: an export of no episode is refused, so there are episodes to take.
    created = researcher_api.post(
        "/api/exports/", {"format": "tokens", "reconstruction": "request"}, format="json"
    )
    assert created.status_code == 202, created.json()
    assert created.json()["reconstruction"] == "per_request"
    refused = researcher_api.post("/api/exports/", {"reconstruction": "whole"}, format="json")
    assert refused.status_code == 400 and list(refused.json()) == ["reconstruction"]
