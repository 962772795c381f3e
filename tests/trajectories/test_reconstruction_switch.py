"""One reconstruction switch: SFT exports, RL samples and the calls selector see an
episode's segments in the same order with the same break labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness_app.harness.llm.reconstruct import unexpected_breaks
from harness_app.roles import Role
from tests import factories
from training.models import ExportStatus
from training.rl.samples import rl_samples_for_recordings
from training.services.exports import sft_export_create, sft_export_run
from trajectories.models import ModelCall, RecordingSession, pack_floats, pack_ints
from trajectories.selectors.calls import episode_segments
from trajectories.services.annotations import annotation_bulk_apply
from trajectories.services.recording import recording_session_close, recording_session_create

pytestmark = pytest.mark.django_db

MAIN = [{"role": "system", "content": "Main agent."}, {"role": "user", "content": "go"}]
SUB = [{"role": "system", "content": "A subagent."}, {"role": "user", "content": "look"}]
# (agent, messages, prompt, completion): the main agent calls, starts a subagent, then
# calls again with its history rewritten, so it has two chains and the subagent one.
CALLS = [
    ("main", MAIN, [1, 2, 3, 4], [100, 101]),
    ("sub", SUB, [7, 8], [200]),
    ("main", MAIN, [1, 2, 9, 9, 9, 9, 9], [102]),
]


def _record(*, reward: float) -> RecordingSession:
    session, _ = recording_session_create(user=None, name="cli run", task="t1")
    for turn, (agent, messages, prompt, completion) in enumerate(CALLS):
        ModelCall.objects.create(
            episode_id=session.episode_id,
            turn_index=turn,
            request={"model": "m", "messages": messages, "tools": []},
            response={"choices": [{"message": {"content": f"reply {turn}"}}]},
            prompt_token_ids_blob=pack_ints(prompt),
            completion_token_ids_blob=pack_ints(completion),
            completion_logprobs_blob=pack_floats([-0.5] * len(completion)),
            policy_version="m",
            agent=agent,
            api="chat",
        )
    return recording_session_close(session=session, reward=reward)


def _export(fmt: str) -> list[dict[str, Any]]:
    export = sft_export_create(filters={"kind": "recorded"}, fmt=fmt, enqueue=False)
    done = sft_export_run(export_id=export.pk)
    assert done is not None and done.status == ExportStatus.DONE, done and done.error
    return [json.loads(line) for line in Path(done.file_path).read_text().splitlines()]


def test_sft_rl_and_the_calls_selector_see_the_same_segments_and_breaks():
    session = _record(reward=1.0)
    _record(reward=0.0)
    researcher = factories.user("rita", Role.RESEARCHER)
    annotation_bulk_apply(
        actor=researcher, filters={"ids": str(session.episode_id)}, label="approve"
    )

    segments, breaks = episode_segments(episode=session.episode)
    calls = ModelCall.objects.filter(episode=session.episode)
    turns: dict[Any, int] = {c.pk: c.turn_index for c in calls}
    # The main agent's chains first, then the subagent's.
    assert [[turns[c] for c in s.call_ids] for s in segments] == [[0], [2], [1]]
    assert [b.reason.split(":")[0] for b in breaks] == [
        "first_call",
        "history_rewritten",
        "subagent_start",
    ]

    rl = rl_samples_for_recordings(task="t1")
    mine = [s for s in rl.sequences if s.episode_id == session.episode_id]
    assert [s.prompt_ids + s.response_ids for s in mine] == [s.token_ids for s in segments]
    assert [b for b in rl.breaks if b.call_id in turns] == unexpected_breaks(breaks)

    tokens = _export("tokens")
    assert [r["input_ids"] for r in tokens] == [s.token_ids for s in segments]
    chat = _export("chat")
    assert [r["messages"][-1]["content"] for r in chat] == ["reply 0", "reply 2", "reply 1"]
