"""Claude Code, Codex, Qwen Code and Pi, each run headless through the recording proxy
against the real vLLM, and each session rebuilt into chains with token ids.

The CLIs come from `make harnesses` (.ci/run installs them). Their prompts run 2-17k
tokens, past SmolLM2's own 8k: the server must be started with LLM_MAX_MODEL_LEN=32768
(.ci/run does). The answers are poor; what is checked is that every call the CLI made
was recorded token-faithfully in the API the CLI speaks.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest

from harness_app.harness.llm.reconstruct import reconstruct
from tests.vllm import VLLM_URL, base_model, needs_vllm
from trajectories.agent_clis import HARNESS_DIR, cli_launch, installed_clis, launch_run
from trajectories.models import ModelCall
from trajectories.services.recording import recording_session_close, recording_session_create

NEEDED_CONTEXT = 24_000
RUN_TIMEOUT_S = 900
API_OF = {"claude": "messages", "codex": "responses", "qwen": "chat", "pi": "chat"}

pytestmark = [
    needs_vllm,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        shutil.which("node") is None,
        reason="node is not installed: the agent CLIs need Node 20 or later",
    ),
]


@pytest.fixture(scope="module")
def served_context() -> int:
    if not (HARNESS_DIR / "node_modules").is_dir():
        pytest.fail(f"the agent CLIs are not installed in {HARNESS_DIR}: run `make harnesses`")
    models = httpx.get(f"{VLLM_URL}/models", timeout=10).json()["data"]
    # LoRA adapters another test loaded are listed too, without a length of their own.
    length = min((int(m["max_model_len"]) for m in models if m.get("max_model_len")), default=0)
    if length < NEEDED_CONTEXT:
        pytest.fail(
            f"the vLLM at {VLLM_URL} serves {length} tokens; the CLIs' prompts need about "
            f"{NEEDED_CONTEXT}: start it with LLM_MAX_MODEL_LEN=32768 scripts/llm/serve.sh"
        )
    return length


@pytest.fixture
def proxied(settings, live_server):
    settings.PROXY_UPSTREAM_URL = VLLM_URL.rstrip("/")
    return live_server.url


def _repository(root: Path) -> Path:
    work = root / "repo"
    work.mkdir()
    (work / "notes.txt").write_text("milk\neggs\n")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    return work


@pytest.mark.parametrize("kind", ["pi", "qwen", "claude", "codex"])
def test_each_cli_is_recorded_token_by_token_and_rebuilt_into_chains(kind, served_context, proxied):
    assert kind in installed_clis(), f"{kind} is missing from {HARNESS_DIR}: run make harnesses"
    model = base_model()
    # The trainer's sampling, whatever the CLI asks: short answers keep the test quick.
    session, key = recording_session_create(
        user=None,
        name=f"{kind} recording test",
        sampling={"model_map": {"*": model}, "max_tokens": 24, "temperature": 1.0},
    )
    root = Path(tempfile.mkdtemp(prefix=f"cli-{kind}-"))
    try:
        work, home = _repository(root), root / "home"
        home.mkdir()
        launch = cli_launch(
            kind,
            base_url=f"{proxied}/proxy/{key}",
            model=model,
            instruction="How many lines does notes.txt have?",
            workdir=work,
            home=home,
        )
        result = launch_run(launch, workdir=work, home=home, timeout_s=RUN_TIMEOUT_S)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    recording_session_close(session=session)

    calls = list(ModelCall.objects.filter(episode=session.episode).order_by("turn_index"))
    assert calls, f"{kind} made no call through the proxy: {result.stderr_tail[-2000:]}"
    assert not result.timed_out, f"{kind} ran past {RUN_TIMEOUT_S} s"
    assert {call.api for call in calls} == {API_OF[kind]}
    completed = [call for call in calls if not call.error]
    assert completed, f"no call of {kind} completed: {[c.error[:200] for c in calls]}"
    for call in completed:
        # The chat call vLLM sampled, with the trainer's sampling in place.
        assert call.request["temperature"] == 1.0 and call.request["model"] == model
        assert len(call.prompt_token_ids) > 500  # a coding agent's system prompt and tools
        assert 0 < len(call.completion_token_ids) <= 24
        assert len(call.completion_logprobs) == len(call.completion_token_ids)

    chains, breaks = reconstruct([call.call_tokens() for call in completed])
    assert chains and breaks[0].reason == "first_call"
    assert len(breaks) == len(chains)  # every chain says why it started
    for chain in chains:
        assert len(chain.token_ids) == len(chain.loss_mask) == len(chain.logprobs)
        assert chain.sampled_tokens > 0
    # Every sampled token is trained exactly once, whatever the chains.
    assert sum(chain.sampled_tokens for chain in chains) == sum(
        len(call.completion_token_ids) for call in completed
    )
