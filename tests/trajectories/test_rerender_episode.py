"""A rerender-mode policy end to end, as a worker runs it: per-call prompts recorded, the
viewer showing the prompt a later turn really saw, per-call training samples for SFT and RL.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness_app.harness.budget import CONTEXT_MODES
from harness_app.models import ContextMode, PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer, render
from training.rl.batches import build_sequences
from training.rl.samples import rl_episodes_for_batch
from training.services.exports import sft_export_create, sft_export_run
from trajectories.models import Episode, ModelCall
from trajectories.rollout import episode_run
from trajectories.selectors.calls import episode_segments
from trajectories.selectors.tokens import token_strips
from trajectories.services.annotations import annotation_label
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db

TURNS = 8  # searches before end_search


def _reply(n: int, body: dict[str, Any]) -> str:
    if n > TURNS:
        return '<tool_call>{"name": "end_search", "arguments": {}}</tool_call>'
    call = {"name": "search_corpus", "arguments": {"query": f"lamp probe{n}"}}
    return f"Looking for the lamp, step {n}.<tool_call>{json.dumps(call)}</tool_call>"


@pytest.fixture
def played(demo_benchmark) -> tuple[Episode, list[dict[str, Any]]]:
    with FakeOpenAIServer(reply=_reply) as fake:
        policy = PolicyConfig.objects.create(
            name="rerender",
            kind=PolicyKind.OPENAI,
            base_url=fake.base_url,
            model="m",
            context_mode=ContextMode.RERENDER,
        )
        batch = batch_create(benchmark=demo_benchmark, policy=policy, query_limit=1, max_turns=12)
        episode = batch.episodes.get()
        episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    completions = [r["body"] for r in fake.requests if r["path"].endswith("/completions")]
    return episode, completions


def test_every_call_is_recorded_as_a_rebuilt_prompt_with_its_messages(played):
    episode, completions = played
    assert episode.termination_reason == "end_search"
    calls = list(ModelCall.objects.filter(episode=episode).order_by("pk"))
    assert len(calls) == len(completions) == TURNS + 1
    for call, body in zip(calls, completions, strict=True):
        assert call.rerendered
        # The ids sent are exactly the stored messages under the server's template.
        assert body["prompt"] == render(call.prompt_messages) == call.prompt_token_ids
        marker = re.search(r"\[Context: (\d+)/30720\]", json.dumps(call.prompt_messages))
        assert (marker is None) == (call.turn_index == 0)


def test_the_viewer_shows_a_later_turns_rerendered_prompt(researcher_client, played):
    episode, _ = played
    page = researcher_client.get(f"/episodes/{episode.pk}/turns/7/prompt/").content.decode()
    assert "rebuilt from the harness state (rerender)" in page
    assert "WORKINGMEMORY as of turn 2:" in page  # the snapshot frozen at n − 5
    assert "lamp probe3" in page and "step 7." in page  # replies to turns 2..6
    # The dropped early turns: their replies (probe1, probe2) and the reset's own turn.
    assert "step 1." not in page and "step 2." not in page
    assert "WORKINGMEMORY as of turn 0" not in page
    detail = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert f"/episodes/{episode.pk}/turns/7/prompt/" in detail
    size = ModelCall.objects.get(episode=episode, turn_index=7).usage["prompt_tokens"]
    assert f"next prompt {size} tokens (rebuilt by the policy)" in detail


def test_each_call_is_its_own_sequence_and_no_break_is_reported(played):
    episode, _ = played
    segments, breaks = episode_segments(episode=episode)
    assert len(segments) == TURNS + 1
    assert {b.reason for b in breaks} == {"first_call", "rerender"}
    strips = token_strips(episode=episode, turn_index=5)
    assert [s.break_reason for s in strips] == ["rerender"]
    assert all("mismatch" not in b.reason for b in breaks)


def test_rl_trains_each_turns_completion_with_the_episode_advantage(played):
    episode, _ = played
    candidates, _ = rl_episodes_for_batch(batch=episode.batch_id)
    build = build_sequences(candidates, {episode.pk: 0.75})
    calls = list(ModelCall.objects.filter(episode=episode).order_by("pk"))
    assert build.breaks == []
    assert len(build.sequences) == len(calls)
    for seq, call in zip(build.sequences, calls, strict=True):
        assert seq.advantage == 0.75 and seq.episode_id == episode.pk
        assert seq.prompt_ids == call.prompt_token_ids
        assert seq.response_ids == call.completion_token_ids
        assert seq.loss_mask == [1] * len(call.completion_token_ids)


def test_sft_exports_one_record_per_call(played, researcher):
    episode, _ = played
    annotation_label(annotator=researcher, episode=episode, label="approve")
    calls = list(ModelCall.objects.filter(episode=episode).order_by("pk"))
    for fmt in ("chat", "tokens"):
        export = sft_export_run(export_id=sft_export_create(fmt=fmt, enqueue=False).pk)
        assert export is not None and export.records == len(calls), export and export.error
        lines = [json.loads(x) for x in Path(export.file_path).read_text().splitlines()]
        if fmt == "chat":
            assert lines[4]["messages"][:-1] == calls[4].prompt_messages
            assert "step 5." in lines[4]["messages"][-1]["content"]
        else:
            call = calls[4]
            assert lines[4]["input_ids"] == call.prompt_token_ids + call.completion_token_ids
        assert "tokens_with_breaks" not in json.dumps(export.manifest)


def test_the_api_sets_the_context_mode_and_limit_with_their_choices(researcher_api):
    body = {"name": "h1", "kind": "openai", "model": "m", "context_mode": "rerender"}
    with FakeOpenAIServer(model="m") as served:  # saving asks for its models
        body["base_url"] = served.base_url
        response = researcher_api.post(
            "/api/policies/", {**body, "context_limit": 2048}, format="json"
        )
    assert response.status_code == 201, response.json()
    assert (response.json()["context_mode"], response.json()["context_limit"]) == ("rerender", 2048)
    bad = researcher_api.post(
        "/api/policies/", {**body, "name": "h2", "context_mode": "rolling"}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["context_mode"] == [
        '"rolling" is not a valid choice.'
    ]
    zero = researcher_api.post(
        "/api/policies/", {**body, "name": "h3", "context_limit": 0}, format="json"
    )
    assert zero.status_code == 400 and "context_limit" in zero.json()
    assert set(ContextMode.values) == set(CONTEXT_MODES)


def test_an_append_episodes_prompt_page_shows_the_whole_conversation(
    researcher_client, demo_benchmark
):
    with FakeOpenAIServer(reply=_reply) as fake:
        policy = PolicyConfig.objects.create(
            name="append", kind=PolicyKind.OPENAI, base_url=fake.base_url, model="m"
        )
        batch = batch_create(benchmark=demo_benchmark, policy=policy, query_limit=1, max_turns=4)
        episode = batch.episodes.get()
        episode_run(episode_id=episode.pk)
    calls = list(ModelCall.objects.filter(episode=episode).order_by("pk"))
    # Each call stores only the messages new since the previous one...
    assert calls[1].prompt_messages[0]["role"] == "assistant"
    assert "lamp probe1" in calls[1].prompt_messages[0]["content"]
    # ...and the page shows them all, exactly what the ids were rendered from.
    whole = calls[0].prompt_messages + calls[1].prompt_messages + calls[2].prompt_messages
    assert render(whole) == calls[2].prompt_token_ids
    page = researcher_client.get(f"/episodes/{episode.pk}/turns/2/prompt/").content.decode()
    assert "You are a search agent" in page and "step 1." in page and "step 2." in page
    assert "step 3." not in page  # the reply to this very prompt
    assert "rerender" not in page
