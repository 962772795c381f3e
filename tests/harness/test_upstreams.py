"""Several vLLM replicas behind one client: least-outstanding routing, ties in turn, a
failed replica left out for its cool-down and probed back, and a clear error when every
replica is down. Two instances of the project's fake server are the replicas."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from harness_app.harness.llm.client import ChatClient, ModelCallError, Sampling
from harness_app.harness.llm.upstreams import (
    NoReplicaError,
    UpstreamPool,
    models_probe,
    replica_urls_parse,
    replicas_for,
)
from tests.fakes.openai_server import FakeOpenAIServer
from tests.vllm import VLLM_URL, base_model, needs_vllm


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def replicas() -> Iterator[tuple[FakeOpenAIServer, FakeOpenAIServer]]:
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        yield a, b


def chat(client: ChatClient) -> None:
    client.complete(client.build_request([{"role": "user", "content": "q"}], Sampling()))


def client_over(pool: UpstreamPool) -> ChatClient:
    return ChatClient(pool.urls[0], "fake-model", upstreams=pool)


def test_a_busy_replica_gets_no_new_call_until_the_other_is_as_busy(replicas):
    a, b = replicas
    a.hold_call = 1
    client = client_over(UpstreamPool([a.base_url, b.base_url]))
    held = threading.Thread(target=chat, args=(client,))
    held.start()
    assert a.held.wait(5)
    for _ in range(3):  # each finishes before the next: b has none in flight, a has one
        chat(client)
    assert (a.calls, b.calls) == (1, 3)
    a.release.set()
    held.join(5)
    chat(client)
    chat(client)
    assert (a.calls, b.calls) == (2, 4)  # idle again: one each


def test_ties_are_taken_in_turn():
    pool = UpstreamPool(["http://r1:1/v1", "http://r2:1/v1", "http://r3:1/v1"])
    picked = []
    for _ in range(6):
        with pool.lease() as lease:
            picked.append(lease.url)
    assert picked == ["http://r1:1/v1", "http://r2:1/v1", "http://r3:1/v1"] * 2
    first, second = pool.acquire(), pool.acquire()
    third = pool.acquire()  # r3 is the only idle one
    assert [first.url, second.url, third.url] == [
        "http://r1:1/v1",
        "http://r2:1/v1",
        "http://r3:1/v1",
    ]
    assert [s.outstanding for s in pool.status()] == [1, 1, 1]
    second.release()
    assert pool.acquire().url == "http://r2:1/v1"


def test_a_replica_answering_5xx_is_skipped_then_probed_back_after_its_cool_down(replicas):
    a, b = replicas
    clock = Clock()
    pool = UpstreamPool(
        [a.base_url, b.base_url], cooldown_s=10, probe=models_probe(1.0), clock=clock
    )
    client = client_over(pool)
    a.refuse = {"chat/completions": 503}
    with pytest.raises(ModelCallError) as failed:
        chat(client)
    assert failed.value.kind == "model_server_error" and failed.value.retryable
    for _ in range(4):
        chat(client)
    assert (a.calls, b.calls) == (0, 4)  # a's refusal never reached its counter
    assert [s.up for s in pool.status()] == [False, True]

    # Still refusing its probe at the end of the cool-down: it stays out.
    a.refuse = {"models": 503}
    clock.now += 10
    chat(client)
    assert [r["path"] for r in a.requests][-1] == "/v1/models"
    assert [s.up for s in pool.status()] == [False, True]

    # Back: the next pick after the next cool-down probes it and routes to it again.
    a.refuse = {}
    clock.now += 10
    chat(client)
    chat(client)
    assert a.calls == 1 and [s.up for s in pool.status()] == [True, True]


def test_a_replica_nobody_listens_on_is_marked_down_and_the_call_can_be_retried(replicas):
    a, _ = replicas
    pool = UpstreamPool(["http://127.0.0.1:9/v1", a.base_url])
    client = client_over(pool)
    with pytest.raises(ModelCallError) as failed:
        chat(client)
    assert failed.value.kind == "model_unreachable"
    chat(client)  # the retry goes to the live one
    assert a.calls == 1
    status = pool.status()[0]
    assert not status.up and status.reason.startswith("unreachable")


def test_every_replica_down_is_an_error_naming_each(replicas):
    a, b = replicas
    a.refuse = b.refuse = {"chat/completions": 500, "models": 500}
    client = client_over(UpstreamPool([a.base_url, b.base_url]))
    for _ in range(2):
        with pytest.raises(ModelCallError):
            chat(client)
    with pytest.raises(ModelCallError) as failed:
        chat(client)
    message = str(failed.value)
    assert failed.value.kind == "model_unreachable"
    assert "every model server replica is down" in message
    assert f"{a.base_url}: answered 500" in message and f"{b.base_url}: answered 500" in message
    with pytest.raises(NoReplicaError):
        client.upstreams.acquire()


def test_a_single_server_is_never_marked_down(replicas):
    a, _ = replicas
    a.refuse = {"chat/completions": 503}
    client = client_over(UpstreamPool([a.base_url]))
    for _ in range(2):
        with pytest.raises(ModelCallError, match="model_server_error"):
            chat(client)
    a.refuse = {}
    chat(client)  # the caller's own retry reaches it, as before replicas existed
    assert a.calls == 1


def test_tokenize_goes_to_a_replicas_root(replicas):
    a, b = replicas
    client = client_over(UpstreamPool([a.base_url, b.base_url]))
    client.tokenize_chat([{"role": "user", "content": "hi"}])
    client.tokenize_chat([{"role": "user", "content": "hi"}])
    assert len(a.tokenize_requests) == 1 and len(b.tokenize_requests) == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("http://a:1/v1, htp://b/v1", r"VLLM_BASE_URLS entry 2 \('htp://b/v1'\) is not an http"),
        ("http://a:1/v1,http://b:x/v1", r"entry 2 \('http://b:x/v1'\) has no valid port"),
        ("http://a:1/v1,http://a:1/v1/", r"names 'http://a:1/v1' twice"),
        (" , ", "names no URL"),
    ],
)
def test_a_bad_replica_list_is_refused_naming_the_entry(raw, message):
    with pytest.raises(ValueError, match=message):
        replica_urls_parse(raw, name="VLLM_BASE_URLS")


def test_only_a_replicas_url_is_routed_over_all_of_them():
    replicas = ["http://a:1/v1", "http://b:1/v1"]
    assert replica_urls_parse(" http://a:1/v1/ ,http://b:1/v1", name="X") == replicas
    assert replicas_for("http://b:1/v1/", replicas) == replicas
    assert replicas_for("http://own:1/v1", replicas) == ["http://own:1/v1"]


@needs_vllm
def test_the_real_server_takes_the_calls_of_a_dead_replica():
    pool = UpstreamPool(["http://127.0.0.1:9/v1", VLLM_URL.rstrip("/")])
    client = ChatClient(VLLM_URL, base_model(), upstreams=pool)
    with pytest.raises(ModelCallError, match="model_unreachable"):
        client.tokenize_chat([{"role": "user", "content": "hi"}])
    ids = client.tokenize_chat([{"role": "user", "content": "hi"}])
    record = client.complete(client.build_completion_request(ids, Sampling(max_tokens=4)))
    assert record.prompt_token_ids == ids and record.completion_token_ids
    assert [s.up for s in pool.status()] == [False, True]
