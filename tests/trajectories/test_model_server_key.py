"""VLLM_API_KEY reaches the configured model server, and only that server."""

from __future__ import annotations

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db

SEARCH = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
END = {"tool": "end_search", "arguments": {}}


def _run_one_episode(benchmark, *, base_url: str) -> None:
    policy = PolicyConfig.objects.create(
        name="keyed", kind=PolicyKind.OPENAI, base_url=base_url, model="m"
    )
    batch = batch_create(benchmark=benchmark, policy=policy, query_limit=1, max_turns=2)
    episode_run(episode_id=batch.episodes.get().pk)


def test_the_configured_server_gets_the_key(demo_benchmark, settings):
    with FakeOpenAIServer(actions=[SEARCH, END]) as fake:
        settings.VLLM_BASE_URL = fake.base_url
        settings.VLLM_API_KEY = "sk-workbench"
        _run_one_episode(demo_benchmark, base_url="")  # the default server
    assert fake.authorizations and set(fake.authorizations) == {"Bearer sk-workbench"}


def test_a_policys_own_server_never_gets_the_key(demo_benchmark, settings):
    settings.VLLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.VLLM_API_KEY = "sk-workbench"
    with FakeOpenAIServer(actions=[SEARCH, END]) as elsewhere:
        _run_one_episode(demo_benchmark, base_url=elsewhere.base_url)
    assert elsewhere.authorizations and "Bearer sk-workbench" not in elsewhere.authorizations
