"""Message-prefix tasks and the run_batch command."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from harness_app.models import PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.models import RolloutBatch
from trajectories.prefixes import PrefixFileError, prefixes_read
from trajectories.rollout import episode_run
from trajectories.services.rollouts import BatchParameterError, batch_create

pytestmark = pytest.mark.django_db

PREFIX = [
    {"role": "system", "content": "You are a careful search agent."},
    {"role": "user", "content": "Earlier question about lamps."},
    {"role": "assistant", "content": '{"tool": "end_search", "arguments": {"reasoning": "x"}}'},
]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "train.jsonl line 2: not valid JSON"),
        ('{"messages": []}', "line 2: field 'query_id' must be a non-empty string"),
        ('{"query_id": "q02", "messages": "hi"}', "field 'messages' must be a non-empty list"),
        ('{"query_id": "q02", "messages": [{"role": "robot"}]}', "messages[0] has role 'robot'"),
        ('{"query_id": "q01", "messages": [{"role": "user", "content": "x"}]}', "appears twice"),
    ],
)
def test_bad_prefix_lines_name_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "train.jsonl"
    good = json.dumps({"query_id": "q01", "messages": PREFIX})
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(PrefixFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        prefixes_read(path)


def test_prefix_queries_must_exist_and_need_an_llm_policy(demo_benchmark, baseline_policy):
    with pytest.raises(BatchParameterError, match="need an OpenAI-compatible policy"):
        batch_create(benchmark=demo_benchmark, policy=baseline_policy, prefixes={"q01": PREFIX})
    llm = PolicyConfig.objects.create(name="llm", kind=PolicyKind.OPENAI, model="m")
    with pytest.raises(BatchParameterError, match="1 prefix query ids are not in benchmark"):
        batch_create(benchmark=demo_benchmark, policy=llm, prefixes={"nope": PREFIX})


def test_episode_starts_from_its_prefix_and_prefix_turns_do_not_count(
    demo_benchmark, django_capture_on_commit_callbacks
):
    search = {"tool": "search_corpus", "arguments": {"query": "Vell lamp"}}
    with FakeOpenAIServer(actions=[search]) as fake:
        llm = PolicyConfig.objects.create(
            name="llm",
            kind=PolicyKind.OPENAI,
            base_url=fake.base_url,
            model="m",
            tool_call_format="json_schema",
        )
        with django_capture_on_commit_callbacks():
            batch = batch_create(
                benchmark=demo_benchmark, policy=llm, prefixes={"q02": PREFIX}, max_turns=2
            )
        episode = batch.episodes.get()
        episode_run(episode_id=episode.pk)
    episode.refresh_from_db()
    assert episode.query.external_id == "q02"
    # The chat renders (the env's token counts send plain text, without messages).
    renders = [r for r in fake.tokenize_requests if "messages" in r]
    assert renders[0]["messages"][:3] == PREFIX
    # Two model generations ran: the assistant message in the prefix did not use a turn.
    assert fake.calls == 2
    assert episode.termination_reason == "max_turns"


def test_run_batch_reports_bad_names_and_parameters(demo_benchmark, baseline_policy):
    with pytest.raises(CommandError, match="no benchmark named 'nope'"):
        call_command("run_batch", "--benchmark", "nope", "--policy", "baseline")
    with pytest.raises(CommandError, match=r"no policy config named 'gpt' \(known: baseline"):
        call_command("run_batch", "--benchmark", "demo", "--policy", "gpt")
    with pytest.raises(CommandError, match="samples_per_query must be between 1 and 64"):
        call_command("run_batch", "--benchmark", "demo", "--policy", "baseline", "--samples", "0")
    assert RolloutBatch.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_run_batch_wait_prints_aggregate_metrics(
    live_worker, demo_benchmark, baseline_policy, capsys
):
    call_command(
        "run_batch",
        "--benchmark",
        "demo",
        "--policy",
        "baseline",
        "--limit",
        "3",
        "--samples",
        "2",
        "--wait",
        "--timeout",
        "120",
        "--json",
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "completed"
    assert summary["episodes_completed"] == 6
    assert 0.0 <= summary["metrics"]["curated_recall"] <= 1.0
    assert summary["metrics"]["n"] == 6


def test_run_batch_wait_names_the_queue_no_worker_consumes(
    demo_benchmark, baseline_policy, monkeypatch, capsys
):
    from harness_app import queues

    monkeypatch.setattr(queues, "_consumed_queues", lambda timeout: frozenset({"celery"}))
    with pytest.raises(CommandError, match="still queued after 1s"):
        call_command(
            "run_batch", "--benchmark", "demo", "--policy", "baseline", "--wait", "--timeout", "1"
        )
    err = capsys.readouterr().err
    assert "no live worker consumes the queue 'rollouts'" in err
    assert "--queues=rollouts" in err
