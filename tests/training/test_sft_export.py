"""SFT exports: what the records hold, which episodes go in, provenance and immutability."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from harness_app.harness.llm.chat_policy import SYSTEM_PROMPTS, ChatPolicy, ChatPolicyConfig
from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from training.models import ExportStatus, SFTExport, SFTExportEpisode
from training.services.exports import ExportError, sft_export_create, sft_export_run
from training.sft import records as sft
from trajectories.models import Episode, ModelCall, Turn, pack_floats, pack_ints
from trajectories.services.annotations import annotation_bulk_apply, annotation_label

pytestmark = pytest.mark.django_db


def _export(**kwargs) -> SFTExport:
    export = sft_export_create(enqueue=False, **kwargs)
    done = sft_export_run(export_id=export.pk)
    assert done is not None and done.status == ExportStatus.DONE, done and done.error
    return done


def _lines(export: SFTExport) -> list[dict]:
    return [json.loads(line) for line in Path(export.file_path).read_text().splitlines()]


@pytest.fixture
def approved_batch(demo_benchmark, baseline_policy, researcher):
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    annotation_bulk_apply(actor=researcher, filters={"batch": batch.pk}, label="approve")
    return batch


def test_baseline_episode_becomes_an_openai_chat_with_tool_calls_and_results(approved_batch):
    export = _export()
    records = _lines(export)
    assert len(records) == export.records == 2
    record = records[0]
    messages = record["messages"]
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPTS["v1"]}
    episode = Episode.objects.filter(batch=approved_batch).order_by("pk").first()
    turns = list(Turn.objects.filter(episode=episode).order_by("index"))
    assert messages[1] == {"role": "user", "content": turns[0].observation}
    assistant = messages[2]
    assert assistant["role"] == "assistant"
    call = assistant["tool_calls"][0]
    assert call["type"] == "function"
    assert call["id"] == turns[1].tool_calls[0]["call_id"]
    assert json.loads(call["function"]["arguments"]) == turns[1].tool_calls[0]["arguments"]
    # One tool message per call, answering its id, then the WORKINGMEMORY as the user.
    tool_messages = messages[3 : 3 + len(assistant["tool_calls"])]
    assert [m["tool_call_id"] for m in tool_messages] == [c["id"] for c in assistant["tool_calls"]]
    assert tool_messages[0]["content"] in turns[1].observation
    after = messages[3 + len(tool_messages)]
    assert after["role"] == "user" and after["content"].startswith("<WORKINGMEMORY>")
    # Every turn's action is there, and the conversation ends on the last one.
    assert sum(m["role"] == "assistant" for m in messages) == len(turns) - 1
    assert messages[-1]["role"] == "assistant"
    assert {t["function"]["name"] for t in record["tools"]} >= {"search_corpus", "end_search"}


def test_only_approved_episodes_unless_the_filters_say_otherwise(approved_batch, researcher):
    first, second = Episode.objects.filter(batch=approved_batch).order_by("pk")
    annotation_label(annotator=researcher, episode=second, label="reject", reason="format")
    assert _export().episodes == 1
    assert _export(filters={"annotation_status": "rejected"}).episodes == 1
    assert SFTExportEpisode.objects.filter(episode=first).count() == 1  # provenance


def test_manifest_hashes_and_provenance_match_the_file(approved_batch):
    export = _export()
    body = Path(export.file_path).read_bytes()
    assert export.manifest["sha256"] == hashlib.sha256(body).hexdigest()
    assert export.manifest["bytes"] == len(body)
    lines = body.splitlines(keepends=True)
    for item in export.items.all():
        blob = b"".join(lines[item.first_line : item.first_line + item.records])
        assert item.sha256 == hashlib.sha256(blob).hexdigest()
    episode = export.items.first().episode
    assert list(episode.sft_exports.values_list("export_id", flat=True)) == [export.pk]


def test_a_finished_export_is_never_rewritten(approved_batch, researcher):
    export = _export()
    path = Path(export.file_path)
    before = path.read_bytes(), path.stat().st_mtime_ns
    annotation_label(
        annotator=researcher,
        episode=Episode.objects.filter(batch=approved_batch).first(),
        label="reject",
        reason="wrong_evidence",
    )
    again = sft_export_run(export_id=export.pk)
    assert again.manifest == export.manifest
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    newer = _export()
    assert newer.file_path != export.file_path and newer.episodes == export.episodes - 1


def test_bad_filters_and_formats_are_refused_with_the_reason(db):
    with pytest.raises(ExportError, match="filter 'rewrd_min': unknown filter"):
        sft_export_create(filters={"rewrd_min": "0.5"}, enqueue=False)
    with pytest.raises(ExportError, match="format 'csv' is not one of chat, tokens"):
        sft_export_create(fmt="csv", enqueue=False)
    assert not SFTExport.objects.exists()


def _llm_batch(benchmark, researcher):
    policy = PolicyConfig.objects.create(
        name="llm", kind=PolicyKind.OPENAI, model="m", base_url="http://127.0.0.1:9/v1"
    )
    batch = factories.run_batch(benchmark, factories.baseline_policy(), queries=1)
    batch.policy = policy
    batch.save(update_fields=["policy"])
    episode = batch.episodes.get()
    annotation_label(annotator=researcher, episode=episode, label="approve")
    return episode


def _call(episode, turn_index, request, response, prompt, completion):
    return ModelCall.objects.create(
        episode=episode,
        turn_index=turn_index,
        request=request,
        response=response,
        prompt_token_ids_blob=pack_ints(prompt),
        completion_token_ids_blob=pack_ints(completion),
        completion_logprobs_blob=pack_floats([-0.5] * len(completion)),
    )


def test_chat_completions_episode_is_its_last_prompt_plus_the_reply(demo_benchmark, researcher):
    episode = _llm_batch(demo_benchmark, researcher)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    reply = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "end_search", "arguments": "{}"}}
        ],
    }
    tools = [{"type": "function", "function": {"name": "end_search", "parameters": {}}}]
    _call(
        episode,
        0,
        {"messages": messages, "tools": tools},
        {"choices": [{"message": reply}]},
        [1, 2],
        [3],
    )
    failed = _call(episode, 1, {"messages": messages}, {}, [1], [])
    ModelCall.objects.filter(pk=failed.pk).update(error="model_timeout: slow")  # ignored
    (record,) = _lines(_export())
    assert record == {"messages": [*messages, reply], "tools": tools}


def test_token_in_llm_episode_is_rebuilt_from_turns_and_recorded_replies(
    demo_benchmark, researcher
):
    episode = _llm_batch(demo_benchmark, researcher)
    turns = list(Turn.objects.filter(episode=episode).order_by("index"))
    for turn in turns[1:]:
        reply = {"choices": [{"text": _blocks(turn)}]}
        _call(episode, turn.index - 1, {"prompt": [1, 2]}, reply, [1, 2], [3, 4])
    (record,) = _lines(_export())
    assistants = [m for m in record["messages"] if m["role"] == "assistant"]
    assert assistants[0] == {"role": "assistant", "content": _blocks(turns[1])}
    assert record["messages"][3]["role"] == "tool"  # results still answer each call


def _blocks(turn):
    return "".join(
        f"<tool_call>{json.dumps({'name': c['name'], 'arguments': c['arguments']})}</tool_call>"
        for c in turn.tool_calls
    )


def test_token_export_masks_everything_the_policy_did_not_sample(demo_benchmark, researcher):
    episode = _llm_batch(demo_benchmark, researcher)
    _call(episode, 0, {"prompt": [1, 2]}, {"choices": [{"text": "a"}]}, [1, 2], [3, 4])
    _call(
        episode, 1, {"prompt": [1, 2, 3, 4, 9]}, {"choices": [{"text": "b"}]}, [1, 2, 3, 4, 9], [5]
    )
    export = _export(fmt="tokens")
    (record,) = _lines(export)
    assert record == {
        "input_ids": [1, 2, 3, 4, 9, 5],
        "labels": [-100, -100, 3, 4, -100, 5],
        "attention_mask": [1] * 6,
    }


def test_token_export_skips_baseline_episodes_and_says_so(approved_batch):
    export = _export(fmt="tokens")
    assert (export.episodes, export.skipped) == (0, 2)
    assert export.manifest["renderings"] == {"skipped:no_token_ids": 2}


def test_system_message_is_the_chat_policys_own():
    tools = [{"type": "function", "function": {"name": "end_search", "parameters": {}}}]
    for fmt in ("openai_tools", "json_schema"):
        policy = ChatPolicy(None, tools, ChatPolicyConfig(tool_call_format=fmt))  # type: ignore[arg-type]
        assert sft.system_message("v1", fmt, tools) == policy._system_message()


def test_observation_is_split_per_call_and_ambiguity_keeps_results_together():
    calls = [{"name": "search_corpus"}, {"name": "read_document"}]
    wm = "<WORKINGMEMORY>\nQUESTION: q\n</WORKINGMEMORY>"
    text = f"[search_corpus] hits\n- a\n\n[read_document] doc text\n\n{wm}"
    assert sft.split_observation(text, calls) == (["hits\n- a", "doc text"], wm)
    tricky = f"[search_corpus] see\n\n[read_document] x\n\n[read_document] real\n\n{wm}"
    results, memory = sft.split_observation(tricky, calls)
    assert results == [tricky[: tricky.rfind("\n\n<WORKINGMEMORY>")]] and memory == wm


def test_export_sft_command_writes_the_file(approved_batch, tmp_path, capsys):
    out = tmp_path / "sub" / "train.jsonl"
    call_command("export_sft", "--out", str(out), "--filter", f"batch={approved_batch.pk}")
    assert len(out.read_text().splitlines()) == 2
    assert "2 episodes, 2 records, 0 skipped" in capsys.readouterr().out
    with pytest.raises(CommandError, match="expected key=value"):
        call_command("export_sft", "--out", str(out), "--filter", "batch")
    with pytest.raises(CommandError, match="filter 'status': 'done' is not one of"):
        call_command("export_sft", "--out", str(out), "--filter", "status=done")


# --- an export of zero episodes is refused, naming the clause that emptied it -----------------


def test_an_export_of_no_approved_episode_is_refused_naming_approved_only(ran_batch):
    with pytest.raises(ExportError) as refused:
        sft_export_create(filters={"batch": ran_batch.pk}, enqueue=False)
    assert str(refused.value) == (
        f"0 episodes: 4 episodes match batch={ran_batch.pk}, but none of them matches "
        "annotation_status=approved (approved only: the default without an annotation status)"
    )
    assert not SFTExport.objects.exists()


def test_the_first_clause_that_leaves_no_episode_is_named(ran_batch, approved_batch):
    first, second = ran_batch.episodes.order_by("pk").values_list("pk", flat=True)[:2]
    filters = {"ids": f"{first},{second}", "batch": approved_batch.pk, "reward_min": 0}
    with pytest.raises(
        ExportError,
        match=r"^0 episodes: 2 episodes match ids \(2 chosen\), but "
        rf"none of them matches batch={approved_batch.pk}$",
    ):
        sft_export_create(filters=filters, enqueue=False)
    with pytest.raises(ExportError, match=r"^0 episodes: no episode matches batch=999999$"):
        sft_export_create(filters={"batch": 999999}, enqueue=False)


def test_episodes_chosen_by_id_are_exported_whatever_their_label(ran_batch, researcher):
    first, second = ran_batch.episodes.order_by("pk")[:2]
    annotation_label(annotator=researcher, episode=second, label="reject", reason="format")
    export = _export(filters={"ids": f"{first.pk},{second.pk}"})
    assert export.episodes == 2
    assert export.filters == {"ids": [first.pk, second.pk]}  # no hidden "approved only"
    chosen_and_approved = {"ids": f"{first.pk},{second.pk}", "annotation_status": "approved"}
    with pytest.raises(ExportError, match=r"none of them matches annotation_status=approved$"):
        sft_export_create(filters=chosen_and_approved, enqueue=False)
