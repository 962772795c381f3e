"""Recorded sessions beside rollouts: the pages, SFT exports and RL batches take them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness_app.roles import Role
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer, sampled
from training.models import ExportStatus
from training.rl.samples import rl_samples_for_recordings
from training.services.exports import sft_export_create, sft_export_run
from trajectories.models import Episode, ModelCall, RecordingSession
from trajectories.services.annotations import annotation_bulk_apply
from trajectories.services.recording import recording_session_close, recording_session_create

pytestmark = pytest.mark.django_db

SYSTEM = {"role": "system", "content": "You are an outside agent."}


def _record(
    client,
    settings,
    *,
    turns: int = 2,
    task: str = "",
    reward: float | None = 1.0,
    subagent: bool = False,
) -> RecordingSession:
    session, key = recording_session_create(user=None, name="swe run", task=task)
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "go"}]
        for turn in range(turns):
            body = {"model": "m", "messages": messages, "tools": []}
            reply = client.post(
                f"/proxy/{key}/v1/chat/completions",
                data=json.dumps(body),
                content_type="application/json",
            ).json()
            messages += [
                {"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                {"role": "tool", "content": f"result {turn}"},
            ]
        if subagent:
            sub = [{"role": "system", "content": "A subagent."}, {"role": "user", "content": "s"}]
            client.post(
                f"/proxy/{key}/v1/chat/completions",
                data=json.dumps({"model": "m", "messages": sub}),
                content_type="application/json",
            )
    return recording_session_close(session=session, reward=reward)


def test_the_list_shows_recorded_episodes_beside_rollouts(
    researcher_client, ran_batch, client, settings
):
    session = _record(client, settings)
    page = researcher_client.get("/episodes/").content.decode()
    assert f'href="/episodes/{session.episode_id}/">#' in page
    assert "swe run" in page and "recorded" in page
    rollout = Episode.objects.filter(batch=ran_batch).first()
    assert f'href="/episodes/{rollout.pk}/">#' in page

    only = researcher_client.get("/episodes/?kind=recorded").content.decode()
    # Rows carry the list's filter to the viewer (its previous/next and the way back).
    assert f'href="/episodes/{session.episode_id}/?from=kind%3Drecorded">#' in only
    assert f'href="/episodes/{rollout.pk}/' not in only
    # The dashboard compares benchmark × policy × ablation: recordings have none.
    dashboard = researcher_client.get("/").content.decode()
    assert "None · None" not in dashboard


def test_a_recorded_episode_page_shows_its_chains_calls_and_token_strips(
    researcher_client, client, settings
):
    session = _record(client, settings, subagent=True)
    page = researcher_client.get(f"/episodes/{session.episode_id}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Chain 1 · main agent" in text and "Chain 2 · subagent" in text
    assert "subagent_start" in text and "reply 2" in text
    assert "Trainable" in text

    strip = researcher_client.get(f"/episodes/{session.episode_id}/turns/1/tokens/")
    assert strip.status_code == 200
    strip_text = strip.content.decode()
    # The second call's sampled tokens, shown as text from the logprobs, trained on.
    assert "loss mask 1" in strip_text and "training sequence 1" in strip_text
    compare = researcher_client.get(f"/compare/?a={session.episode_id}&b={session.episode_id}")
    assert compare.status_code == 400 and "recorded session" in compare.content.decode()
    document = researcher_client.get(f"/episodes/{session.episode_id}/document/?doc=x")
    assert document.status_code == 404


def test_an_untrainable_session_says_why_on_its_page(researcher_client, client, settings):
    session, key = recording_session_create(user=None)
    settings.PROXY_UPSTREAM_URL = "http://127.0.0.1:9/v1"
    client.post(
        f"/proxy/{key}/v1/chat/completions",
        data=json.dumps({"model": "m", "messages": [SYSTEM]}),
        content_type="application/json",
    )
    text = researcher_client.get(f"/episodes/{session.episode_id}/").content.decode()
    assert "Not trainable" in text and "aborted_call" in text
    assert "Calls without a completion" in text


@pytest.mark.parametrize("fmt", ["tokens", "chat"])
def test_approved_recorded_episodes_go_into_sft_exports(client, settings, fmt):
    session = _record(client, settings, turns=2)
    annotator = factories.user("rita", Role.RESEARCHER)
    annotation_bulk_apply(actor=annotator, filters={"kind": "recorded"}, label="approve")
    export = sft_export_create(enqueue=False, filters={"kind": "recorded"}, fmt=fmt)
    done = sft_export_run(export_id=export.pk)
    assert done is not None and done.status == ExportStatus.DONE, done and done.error
    lines = [json.loads(line) for line in Path(done.file_path).read_text().splitlines()]
    assert done.episodes == 1 and len(lines) == 1
    if fmt == "tokens":
        trained = [t for t in lines[0]["labels"] if t != -100]
        assert trained == sampled("reply 1")[0] + sampled("reply 2")[0]
    else:
        messages = lines[0]["messages"]
        assert messages[0] == SYSTEM
        assert messages[-1] == {"role": "assistant", "content": "reply 2"}
    assert session.episode.sft_exports.count() == 1


def _chat_export_of(session: RecordingSession) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    annotator = factories.user("rita", Role.RESEARCHER)
    annotation_bulk_apply(actor=annotator, filters={"kind": "recorded"}, label="approve")
    export = sft_export_create(enqueue=False, filters={"kind": "recorded"}, fmt="chat")
    done = sft_export_run(export_id=export.pk)
    assert done is not None and done.status == ExportStatus.DONE, done and done.error
    lines = [json.loads(line) for line in Path(done.file_path).read_text().splitlines()]
    return lines, done.manifest


def test_a_chat_export_keeps_every_agents_conversation(client, settings):
    # The main agent's two turns, then a subagent with its own system prompt.
    session = _record(client, settings, turns=2, subagent=True)
    lines, manifest = _chat_export_of(session)
    assert [line["messages"][0]["content"] for line in lines] == [
        SYSTEM["content"],
        "A subagent.",
    ]
    main, sub = (line["messages"] for line in lines)
    assert main[-1] == {"role": "assistant", "content": "reply 2"}
    assert [m["role"] for m in main] == ["system", "user", "assistant", "tool", "assistant"]
    assert sub[1:] == [
        {"role": "user", "content": "s"},
        {"role": "assistant", "content": "reply 3"},
    ]
    assert "request_messages_per_chain" in json.dumps(manifest)


def test_a_chat_export_keeps_the_turns_before_a_context_compaction(client, settings):
    session, key = recording_session_create(user=None, name="compacting")
    with FakeOpenAIServer() as fake:
        settings.PROXY_UPSTREAM_URL = fake.base_url

        def call(messages: list[dict[str, Any]]) -> str:
            body = {"model": "m", "messages": messages}
            reply = client.post(
                f"/proxy/{key}/v1/chat/completions",
                data=json.dumps(body),
                content_type="application/json",
            ).json()
            return reply["choices"][0]["message"]["content"]

        history = [SYSTEM, {"role": "user", "content": "go"}]
        history += [{"role": "assistant", "content": call(history)}]
        history += [{"role": "tool", "content": "a long result"}]
        before = call(history)
        call([SYSTEM, {"role": "user", "content": "summary so far"}])  # compacted
    lines, _ = _chat_export_of(recording_session_close(session=session, reward=1.0))

    assert len(lines) == 2
    assert lines[0]["messages"][-1] == {"role": "assistant", "content": before}
    assert lines[0]["messages"][:4] == history
    assert lines[1]["messages"][1] == {"role": "user", "content": "summary so far"}


def test_recorded_sessions_of_one_task_form_an_rl_group(client, settings):
    good = _record(client, settings, task="t1", reward=1.0)
    bad = _record(client, settings, task="t1", reward=0.0)
    unclosed, _ = recording_session_create(user=None, task="t1")
    aborted = _record(client, settings, task="t1", reward=1.0)
    ModelCall.objects.filter(episode=aborted.episode).update(aborted=True, error="stream_broken")
    RecordingSession.objects.filter(pk=aborted.pk).update(untrainable_reason="aborted_call: 0")

    build = rl_samples_for_recordings(task="t1")
    by_episode = {s.episode_id: s for s in build.sequences}
    assert set(by_episode) == {good.episode_id, bad.episode_id}
    assert by_episode[good.episode_id].advantage == pytest.approx(0.5)
    assert by_episode[bad.episode_id].advantage == pytest.approx(-0.5)
    assert by_episode[good.episode_id].group_id == good.episode_id
    sequence = by_episode[good.episode_id]
    trained = [t for t, m in zip(sequence.response_ids, sequence.loss_mask, strict=True) if m]
    assert trained == sampled("reply 1")[0] + sampled("reply 2")[0]
    reasons = {e.episode_id: e.reason for e in build.exclusions}
    assert reasons[aborted.episode_id].startswith("aborted_call")
    assert reasons[unclosed.episode_id].startswith("not_completed")
