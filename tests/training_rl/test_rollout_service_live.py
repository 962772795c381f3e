"""The rollout service with its real parts: rollout workers playing the episodes, and an
outside trainer (examples/external_trainer.py) in its own process, talking HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from harness_app.models import PolicyConfig, PolicyKind
from harness_app.roles import Role
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer
from tests.paths import ROOT
from tests.training_rl.rollout_service import deliveries, group_play, request_create
from tests.workers import start_worker, wait_until
from training.models import DeliveryState, RolloutDelivery, RolloutRequest, RolloutRequestStatus
from training.services.rollout_service import rollout_group_ack, rollout_groups_pull
from trajectories.models import Episode, EpisodeStatus

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = {"tool": "search_corpus", "arguments": {"query": "Vell lamp inventor"}}
END = {"tool": "end_search", "arguments": {}}


def _pull_until_done(request, *, timeout: float, log: Any) -> list[dict[str, Any]]:
    """Pull and ack like a trainer until the request is no longer open."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        pulled = rollout_groups_pull(request=request, trainer_version=0, max_groups=4)
        for group in pulled.groups:
            rollout_group_ack(request=request, token=group["lease"])
        got += pulled.groups
        if pulled.status != RolloutRequestStatus.OPEN:
            return got
        assert time.monotonic() < deadline, f"request still open: {pulled.counts}\n{log()[-3000:]}"
        time.sleep(0.3)


def test_baseline_groups_from_a_real_worker_are_all_zero_variance(
    tmp_path, demo_benchmark, baseline_policy
):
    # The baseline policy is deterministic: every sample of a query earns the same reward,
    # so no group carries a signal and none may reach the trainer.
    request = request_create(demo_benchmark, baseline_policy, groups_wanted=2, max_turns=5)
    worker = start_worker(tmp_path, queues="rollouts")
    try:
        assert _pull_until_done(request, timeout=240, log=worker.log) == []
    finally:
        worker.stop()
    request.refresh_from_db()
    assert request.status == RolloutRequestStatus.EXHAUSTED
    states = [d.state for d in deliveries(request)]
    assert states == [DeliveryState.ZERO_VARIANCE] * 2


def test_llm_groups_arrive_as_the_worker_finishes_them_with_their_tokens(tmp_path, demo_benchmark):
    def reply(n: int, body: dict[str, Any]) -> str:
        # Sample 0 of each group searches before it ends, sample 1 ends at once, so their
        # rewards differ. The worker plays one episode at a time: the running one asks.
        if "messages" in body:
            seen = json.dumps(body["messages"])
        else:
            seen = "".join(chr(t) for t in body.get("prompt") or [] if 31 < t < 0x110000)
        if SEARCH["arguments"]["query"] in seen:
            return json.dumps(END)
        try:
            running = Episode.objects.filter(status=EpisodeStatus.RUNNING)
            sample = running.values_list("sample_index", flat=True).first()
        finally:
            connection.close()  # this runs in the fake server's thread
        return json.dumps(SEARCH if sample == 0 else END)

    with FakeOpenAIServer(reply=reply) as llm:
        policy = PolicyConfig.objects.create(
            name="fake-llm",
            kind=PolicyKind.OPENAI,
            base_url=llm.base_url,
            model="m",
            tool_call_format="json_schema",
            sampling={"temperature": 0.7, "max_tokens": 256},
        )
        request = request_create(demo_benchmark, policy, groups_wanted=2, max_turns=4)
        worker = start_worker(tmp_path, queues="rollouts_llm", pool="threads", concurrency=1)
        try:
            groups = _pull_until_done(request, timeout=240, log=worker.log)
        finally:
            worker.stop()
    request.refresh_from_db()
    assert request.status == RolloutRequestStatus.SATISFIED, [d.state for d in deliveries(request)]
    assert len(groups) == 2
    for group in groups:
        assert len(set(group["rewards"])) == 2
        assert sum(group["advantages"]) == pytest.approx(0.0, abs=1e-9)
        for sample in group["samples"]:
            assert sum(sample["loss_mask"]) > 0
            assert len(sample["rollout_logprobs"]) == len(sample["response_ids"])
            # The fake samples one token per character of its JSON reply, then EOS (2).
            sampled = [
                t for t, m in zip(sample["response_ids"], sample["loss_mask"], strict=True) if m
            ]
            assert "end_search" in "".join(chr(t) for t in sampled if t > 31)


def _served_policy_and_token() -> tuple[PolicyConfig, str]:
    """A researcher's API token, and an OpenAI-compatible policy for requests to name."""
    researcher = factories.user("rita", Role.RESEARCHER)
    token, _ = Token.objects.get_or_create(user=researcher)
    policy = PolicyConfig.objects.create(
        name="served", kind=PolicyKind.OPENAI, base_url="http://127.0.0.1:8011/v1", model="m"
    )
    return policy, token.key


def _trainer_start(
    live_server: Any, token: str, *args: str, stderr: int = subprocess.STDOUT
) -> subprocess.Popen[bytes]:
    """examples/external_trainer.py in its own process, talking HTTP to the live server."""
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "examples" / "external_trainer.py"),
            f"--base-url={live_server.url}",
            f"--token={token}",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_consumer_killed_before_its_ack_loses_nothing(live_server, tmp_path, demo_benchmark):
    policy, token = _served_policy_and_token()
    request = request_create(demo_benchmark, policy, groups_wanted=1, lease_s=2)
    group_play(deliveries(request)[0], [1.0, 0.0])
    trainer = _trainer_start(
        live_server,
        token,
        f"--request={request.pk}",
        "--step-s=600",  # a training step that is still running when the kill comes
        "--consumer=doomed",
    )
    try:
        assert trainer.stdout is not None
        line = json.loads(trainer.stdout.readline() or "{}")
        assert line.get("event") == "pulled", line
    finally:
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=10)
    delivery = RolloutDelivery.objects.get(pk=line["delivery"])
    assert delivery.state == DeliveryState.LEASED
    assert rollout_groups_pull(request=request, trainer_version=0).groups == []  # leased
    redelivered: list[dict[str, Any]] = []
    wait_until(
        lambda: (
            redelivered.extend(rollout_groups_pull(request=request, trainer_version=0).groups)
            or redelivered
        ),
        timeout=20,
        what="the group to come back after its lease",
    )
    [again] = redelivered
    assert again["delivery"] == line["delivery"]
    assert (again["times_delivered"], again["lease"] != line["lease"]) == (2, True)
    assert rollout_group_ack(request=request, token=again["lease"]).status == "satisfied"


def _reference_trainer_run(live_server, demo_benchmark, *extra: str) -> list[dict[str, Any]]:
    policy, token = _served_policy_and_token()
    trainer = _trainer_start(
        live_server,
        token,
        f"--benchmark={demo_benchmark.pk}",
        f"--policy={policy.pk}",
        "--group-size=2",
        "--groups=2",
        "--over-sample=1.5",
        "--wait-s=1",
        *extra,
        stderr=subprocess.DEVNULL,  # model loading notes; the events are on stdout
    )
    try:
        assert trainer.stdout is not None
        submitted = json.loads(trainer.stdout.readline())
        assert submitted["event"] == "submitted"
        request = RolloutRequest.objects.get(pk=submitted["request"])
        first, second, _third = deliveries(request)  # ceil(2 x 1.5) launched
        group_play(first, [1.0, 0.0])
        group_play(second, [0.0, 0.5])
        # Only the event lines: a library may print its own notes (model loading).
        events = [json.loads(line) for line in trainer.stdout if line.startswith(b"{")]
    finally:
        trainer.kill()
        trainer.wait(timeout=10)
    return events


def test_the_reference_trainer_submits_steps_acks_and_finishes(live_server, demo_benchmark):
    events = _reference_trainer_run(live_server, demo_benchmark)
    steps = [e for e in events if e["event"] == "stepped"]
    assert sum(len(e["groups"]) for e in steps) == 2
    assert all(e["trained_tokens"] > 0 for e in steps)
    acked = [e for e in events if e["event"] == "acked"]
    assert [e["answer"]["already_acked"] for e in acked] == [False, False]
    assert events[-1]["event"] == "done"
    assert events[-1]["status"] == "satisfied"
    assert events[-1]["counts"]["straggler"] == 1


def test_the_reference_trainer_takes_real_steps_with_the_builtin_trainer(
    live_server, demo_benchmark, smollm2_dir
):
    events = _reference_trainer_run(live_server, demo_benchmark, f"--model-dir={smollm2_dir}")
    steps = [e for e in events if e["event"] == "stepped"]
    assert steps, events[-3:]
    assert all(e["trained_tokens"] > 0 and e["seconds"] > 0 for e in steps)
    assert events[-1]["status"] == "satisfied"


def test_the_reference_trainer_stops_when_too_few_groups_can_be_delivered(
    live_server, demo_benchmark
):
    # Two groups wanted, one zero-variance: after the other is acked nothing is left, and
    # the trainer must end with the service's reason rather than pull forever.
    policy, token = _served_policy_and_token()
    request = request_create(demo_benchmark, policy, groups_wanted=2)
    varied, flat = deliveries(request)
    group_play(varied, [1.0, 0.0])
    group_play(flat, [0.3, 0.3])
    trainer = _trainer_start(live_server, token, f"--request={request.pk}", "--wait-s=0.2")
    try:
        out, _ = trainer.communicate(timeout=30)
    finally:
        trainer.kill()
        trainer.wait(timeout=10)
    events = [json.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    assert [e["event"] for e in events] == ["pulled", "stepped", "acked", "done"]
    assert events[-1]["status"] == "exhausted"
    assert events[-1]["reason"] == (
        "nothing left to deliver: 1 of the 2 groups wanted were acknowledged; "
        "dropped: 1 zero_variance"
    )
    assert trainer.returncode == 1  # fewer groups than asked for


def test_concurrent_consumers_never_share_a_group(demo_benchmark):
    policy = PolicyConfig.objects.create(
        name="served", kind=PolicyKind.OPENAI, base_url="http://127.0.0.1:8011/v1", model="m"
    )
    request = request_create(demo_benchmark, policy, groups_wanted=6)
    for delivery in deliveries(request):
        group_play(delivery, [1.0, 0.0])
    got: list[list[int]] = []
    start = threading.Barrier(8)

    def consumer() -> None:
        try:
            start.wait()
            pulled = rollout_groups_pull(request=request, trainer_version=0, max_groups=2)
            got.append([g["delivery"] for g in pulled.groups])
        finally:
            connection.close()

    threads = [threading.Thread(target=consumer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    delivered = [d for ids in got for d in ids]
    assert len(got) == 8
    assert sorted(delivered) == sorted(d.pk for d in deliveries(request))  # each once
