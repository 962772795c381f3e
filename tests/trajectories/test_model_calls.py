"""One ModelCall writer: a rollout worker's calls and the recording proxy's are stored alike."""

from __future__ import annotations

from typing import Any

import pytest
from django.forms.models import model_to_dict

from harness_app.harness.llm.client import ModelCallRecord
from trajectories.models import ModelCall
from trajectories.services.model_calls import OWN_COLUMNS, model_call_columns
from trajectories.services.recording import (
    RecordedCall,
    recorded_call_save,
    recording_session_create,
)
from trajectories.services.rollouts import batch_create, episode_claim, model_calls_record

pytestmark = pytest.mark.django_db

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
USAGE = {"prompt_tokens": 3, "completion_tokens": 2}
RESPONSE: dict[str, Any] = {
    "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}],
    "usage": USAGE,
}
PROMPT, COMPLETION, LOGPROBS = [1, 2, 3], [40000, 5], [-0.5, -0.25]


def _stored(call: ModelCall) -> dict[str, Any]:
    row = model_to_dict(call)
    for own in ("id", "episode", "turn_index"):
        row.pop(own)
    return row


def test_a_worker_call_and_a_recorded_call_are_stored_as_the_same_row(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():  # the episode is not sent to a worker
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=1)
    episode = batch.episodes.get()
    claim = episode_claim(episode_id=episode.pk)
    assert claim is not None
    record = ModelCallRecord(
        request=REQUEST,
        response=RESPONSE,
        prompt_token_ids=PROMPT,
        completion_token_ids=COMPLETION,
        completion_logprobs=LOGPROBS,
        finish_reason="length",
        usage=USAGE,
        latency_ms=2.5,
        policy_version="m@v1",
    )
    model_calls_record(claim=claim, calls=[(0, record)])
    session, _ = recording_session_create(user=None)
    recorded = RecordedCall(
        request=REQUEST,
        response=RESPONSE,
        prompt_ids=PROMPT,
        completion_ids=COMPLETION,
        logprobs=LOGPROBS,
        agent="",
        policy_version="m@v1",
        latency_ms=2.5,
        api="",
    )
    recorded_call_save(session=session, call=recorded)

    worker = ModelCall.objects.get(episode=episode)
    proxy = ModelCall.objects.get(episode_id=session.episode_id)
    assert _stored(worker) == _stored(proxy)
    assert worker.completion_token_ids == COMPLETION and worker.finish_reason == "length"
    assert worker.created_at is not None and proxy.created_at is not None


def test_every_model_call_column_is_written_by_the_one_writer():
    # A new column of ModelCall must be named in model_call_columns, which both the
    # worker's bulk insert and the proxy's raw insert take their columns from.
    columns = {field.attname for field in ModelCall._meta.concrete_fields} - OWN_COLUMNS
    written = model_call_columns(
        episode_id=1,
        turn_index=0,
        request={},
        response={},
        prompt_ids=[],
        completion_ids=[],
        logprobs=[],
        finish_reason="",
        usage={},
        latency_ms=0.0,
        policy_version="",
    )
    assert set(written) == columns
