"""Storing proxied calls: numbering under concurrency, policy versions, what is stored."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from django.db import connection

from trajectories.models import Episode, ModelCall, RecordingSession
from trajectories.services.recording import (
    RecordedCall,
    recorded_call_save,
    recording_session_create,
)

CALL = RecordedCall(
    request={"model": "m", "messages": [{"role": "system", "content": "agent"}]},
    response={"model": "m", "choices": [{"finish_reason": "stop"}], "usage": {"total_tokens": 5}},
    prompt_ids=[1, 2, 3],
    completion_ids=[4, 5],
    logprobs=[-0.5, -0.25],
    agent="a1",
    policy_version="m",
    latency_ms=2.5,
)


def _save_in_parallel(session: RecordingSession, calls: list[RecordedCall]) -> list[int]:
    indexes: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def save(call: RecordedCall) -> None:
        try:
            start.wait()
            indexes.append(recorded_call_save(session=session, call=call))
        except BaseException as exc:  # reported below, with the thread's traceback lost
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=save, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return indexes


@pytest.mark.django_db(transaction=True)
def test_concurrent_calls_get_distinct_gap_free_turn_indexes():
    # An agent's parallel subagents call at once; each call must keep its own number.
    session, _ = recording_session_create(user=None)
    calls = [replace(CALL, completion_ids=[100 + n], logprobs=[-0.1]) for n in range(12)]

    returned = _save_in_parallel(session, calls)

    assert sorted(returned) == list(range(12))
    stored = ModelCall.objects.filter(episode=session.episode)
    assert sorted(stored.values_list("turn_index", flat=True)) == list(range(12))
    by_index = {c.turn_index: c.completion_token_ids[0] for c in stored}
    assert sorted(by_index.values()) == [100 + n for n in range(12)]
    episode = Episode.objects.get(pk=session.episode_id)
    assert episode.turns == 12 and episode.policy_version == "m"
    session.refresh_from_db()
    assert session.trainable


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_call_from_another_policy_version_makes_the_session_untrainable():
    session, _ = recording_session_create(user=None)
    calls = [CALL] * 5 + [replace(CALL, policy_version="step-1")]

    _save_in_parallel(session, calls)

    session.refresh_from_db()
    assert session.untrainable_reason.startswith("mixed_policy_versions: ")
    first = Episode.objects.get(pk=session.episode_id).policy_version
    # Whichever version answered first is the episode's; the other one is named as mixed.
    assert set(session.untrainable_reason.split(": ")[1].split(", ")) == {"m", "step-1"}
    assert first in {"m", "step-1"}


@pytest.mark.django_db
def test_a_call_is_stored_whole():
    session, _ = recording_session_create(user=None)
    assert recorded_call_save(session=session, call=CALL) == 0
    assert recorded_call_save(session=session, call=replace(CALL, error="upstream_400")) == 1

    first, refused = ModelCall.objects.filter(episode=session.episode).order_by("turn_index")
    assert first.request == CALL.request and first.response == CALL.response
    assert first.token_fields() == {
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [4, 5],
        "completion_logprobs": [-0.5, -0.25],
    }
    assert (first.finish_reason, first.usage, first.agent) == ("stop", {"total_tokens": 5}, "a1")
    assert (first.latency_ms, first.policy_version, first.error) == (2.5, "m", "")
    assert first.created_at is not None
    assert refused.error == "upstream_400" and not refused.aborted


@pytest.mark.django_db
def test_an_aborted_call_names_itself_as_the_reason_the_session_is_untrainable():
    session, _ = recording_session_create(user=None)
    recorded_call_save(session=session, call=CALL)
    recorded_call_save(session=session, call=replace(CALL, error="stream_broken: x", aborted=True))
    recorded_call_save(session=session, call=replace(CALL, policy_version="other"))
    session.refresh_from_db()
    # The first reason stays.
    assert session.untrainable_reason == "aborted_call: call 1 (stream_broken: x)"
