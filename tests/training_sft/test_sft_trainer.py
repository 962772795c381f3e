"""The SFT trainer on SmolLM2-135M on the CPU: what it trains on, its split, its errors,
that it learns the approved trajectories, and that a cancelled run resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.paths import ROOT

pytest.importorskip("trl", reason="the SFT trainer needs trl (the 'train' extra)")

from training.sft import examples as sft_records
from training.sft import train as sft_train
from training.sft.examples import IGNORE_INDEX, SFTDataError
from training.sft.train import (
    SFTModelError,
    SFTSettings,
    SFTSettingsError,
)

TEMPLATE = (ROOT / "scripts/llm/chat_template.jinja").read_text()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "BM25 search over the corpus",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]
TOPICS = ["volcano", "glacier", "comet", "harbour", "orchard", "lighthouse", "canyon", "meadow"]


def conversation(topic: str) -> dict[str, Any]:
    """A short episode of the harness's shape: a tool call, its result, a final answer."""
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"query": f"{topic} history"})},
    }
    return {
        "messages": [
            {"role": "system", "content": "You search a corpus and curate evidence."},
            {"role": "user", "content": f"Question: who first mapped the {topic}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": f"[d1] The {topic} survey."},
            {"role": "assistant", "content": f"The {topic} was mapped in the d1 survey."},
        ],
        "tools": TOOLS,
    }


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def trained_text(tokenizer: Any, ids: list[int], labels: list[int]) -> str:
    return tokenizer.decode([t for t, lab in zip(ids, labels, strict=True) if lab != IGNORE_INDEX])


# --- records -------------------------------------------------------------------------------


def test_a_chat_record_trains_only_the_assistant_turns(tokenizer):
    ids, labels = sft_records.chat_example(conversation("comet"), tokenizer, TEMPLATE, where="t")
    text = trained_text(tokenizer, ids, labels)
    assert '<tool_call>\n{"name": "search", "arguments": {"query": "comet history"}}' in text
    assert "The comet was mapped in the d1 survey.<|im_end|>" in text
    # Nothing the policy did not write: the system prompt, the question, the tool result,
    # the tool list and the role headers stay out of the loss.
    for unseen in ("curate evidence", "who first mapped", "[d1] The comet survey", "BM25", "user"):
        assert unseen not in text
    # The full rendering is what vLLM's template gives the model (tools in the system turn).
    full = tokenizer.decode(ids)
    assert full.startswith("<|im_start|>system\nYou search a corpus") and "<tools>" in full


def test_a_token_record_trains_as_recorded(tmp_path, tokenizer):
    record = {"input_ids": [1, 2, 3, 4, 5], "labels": [-100, -100, 3, 4, -100]}
    path = write_lines(tmp_path / "t.jsonl", [record])
    loaded = sft_records.records_load(path, tokenizer, chat_template=TEMPLATE, max_length=64)
    (example,) = loaded.examples
    assert (example.input_ids, example.labels, example.source) == (
        [1, 2, 3, 4, 5],
        [-100, -100, 3, 4, -100],
        sft_records.INPUT_TOKENS,
    )


def test_long_records_are_cut_and_records_left_without_targets_dropped(tmp_path, tokenizer):
    records = [
        {"input_ids": list(range(1, 41)), "labels": [-100] * 20 + list(range(21, 41))},
        {"input_ids": list(range(1, 41)), "labels": [-100] * 30 + list(range(31, 41))},
    ]
    path = write_lines(tmp_path / "t.jsonl", records)
    loaded = sft_records.records_load(path, tokenizer, chat_template=None, max_length=25)
    assert [len(e.input_ids) for e in loaded.examples] == [25]
    assert loaded.counts["truncated"] == 2 and loaded.counts["dropped_no_target"] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"messages": []}\n', "t.jsonl line 1: a chat record needs a non-empty 'messages' list"),
        ('{"input_ids": [1]}\n', "t.jsonl line 1: a token record needs 'input_ids' and 'labels'"),
        ("\nnot json\n", "t.jsonl line 2: not JSON"),
        ("", "t.jsonl: no record with a token to train on (0 lines)"),
    ],
)
def test_bad_export_lines_are_named(tmp_path, tokenizer, content, message):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(SFTDataError) as caught:
        sft_records.records_load(path, tokenizer, chat_template=TEMPLATE, max_length=64)
    assert str(caught.value).startswith(message)


def test_the_eval_split_keeps_each_episode_whole():
    examples = [
        sft_records.Example([1, 2], [-100, 2], episode=line // 2, line=line, source="chat_template")
        for line in range(20)
    ]
    train, held = sft_records.split_by_episode(examples, 0.2, seed=3)
    assert {e.episode for e in train}.isdisjoint({e.episode for e in held})
    assert len({e.episode for e in held}) == 2 and len(held) == 4
    assert sft_records.split_by_episode(examples, 0.2, seed=3)[1] == held  # seeded
    with pytest.raises(SFTDataError, match="at least 2 episodes"):
        sft_records.split_by_episode(examples[:2], 0.2, seed=0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"lora_rank": 0}, "lora_rank"),
        ({"epochs": 0.0}, "epochs"),
        ({"eval_fraction": 1.0}, "eval_fraction"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"lora_targets": ()}, "lora_targets"),
    ],
)
def test_settings_refused_name_their_field(change, field):
    with pytest.raises(SFTSettingsError) as caught:
        SFTSettings(**change).check()
    assert caught.value.field == field


def test_a_missing_base_model_is_a_clear_error(tmp_path):
    export = write_lines(tmp_path / "e.jsonl", [conversation("comet")])
    with pytest.raises(SFTModelError, match=r"has no config\.json"):
        sft_train.sft_train(
            model_dir=tmp_path / "nowhere",
            export_path=export,
            output_dir=tmp_path / "out",
            settings=SFTSettings(),
        )


# --- training ------------------------------------------------------------------------------

SMALL = SFTSettings(
    lora_rank=8,
    lora_alpha=16,
    lora_targets=("q_proj", "v_proj"),
    learning_rate=2e-3,
    epochs=2.0,
    max_length=512,
    eval_fraction=0.25,
    eval_steps=4,
    save_steps=100,
)


def test_sft_learns_the_approved_trajectories(tmp_path, smollm2_dir, tokenizer):
    export = write_lines(tmp_path / "e.jsonl", [conversation(t) for t in TOPICS])
    points: list[sft_train.SFTProgress] = []
    result = sft_train.sft_train(
        model_dir=smollm2_dir,
        export_path=export,
        output_dir=tmp_path / "out",
        settings=SMALL,
        chat_template=TEMPLATE,
        progress=points.append,
    )
    m = result.metrics
    assert result.status == "completed"
    assert m["eval_loss_after"] < m["eval_loss_before"]
    assert m["eval_action_logprob_after"] > m["eval_action_logprob_before"]
    assert result.manifest["input"] == "chat_template"
    assert (result.manifest["train_episodes"], result.manifest["eval_episodes"]) == (6, 2)
    # A loss per step and eval points at step 0, every eval_steps and at the end.
    assert [p.step for p in points if p.loss is not None] == list(range(1, m["steps"] + 1))
    assert [p.step for p in points if p.eval_loss is not None][:3] == [0, 4, 8]
    assert m["tokens_per_s"] > 0 and m["train_tokens"] > 0
    # The adapter is a peft folder vLLM can load, at the rank asked for.
    assert result.adapter_dir is not None
    config = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert config["r"] == 8 and set(config["target_modules"]) == {"q_proj", "v_proj"}
    assert (result.adapter_dir / "adapter_model.safetensors").is_file()
    # An RL job warm-started from it trains on from these weights.
    warm_start_trains_on(smollm2_dir, result.adapter_dir, tokenizer)


def warm_start_trains_on(model_dir: Path, adapter: Path, tokenizer: Any) -> None:
    """The RL trainer loaded from the SFT adapter scores an approved action above the base
    model does, and a step with a positive advantage raises it further."""
    from training.rl.batches import TrainSequence
    from training.rl.trainer import LoraSettings, PolicyTrainer, TrainSettings

    ids, labels = sft_records.chat_example(conversation("volcano"), tokenizer, TEMPLATE, where="t")
    # The last assistant message (the final answer) as the sampled response.
    trained = [i for i, label in enumerate(labels) if label != IGNORE_INDEX]
    start = max(i for i in trained if labels[i - 1] == IGNORE_INDEX)
    reply = ids[start : trained[-1] + 1]
    seq = TrainSequence(
        sample_id="0-0", group_id=0, episode_id=0, segment_idx=0, policy_version="sft",
        prompt_ids=ids[:start], response_ids=reply, loss_mask=[1] * len(reply),
        rollout_logprobs=[-1.0] * len(reply), reward=1.0, advantage=1.0,
        termination_reason="end_search",
    )  # fmt: skip
    settings = TrainSettings(lr=1e-3, behaviour_logprobs="trainer")
    base = PolicyTrainer(model_dir, lora=LoraSettings(rank=8), settings=settings)
    base_logprob = sum(base.recompute_logprobs([seq])[0])
    del base
    warm = PolicyTrainer(model_dir, adapter_dir=adapter, settings=settings)
    assert warm.restore_optimizer(adapter) is False  # SFT leaves no RL optimiser state
    warm_logprob = sum(warm.recompute_logprobs([seq])[0])
    assert warm_logprob > base_logprob
    warm.train_step([seq])
    assert sum(warm.recompute_logprobs([seq])[0]) > warm_logprob


def test_a_cancelled_run_keeps_a_checkpoint_and_resumes_to_the_same_schedule(tmp_path, smollm2_dir):
    export = write_lines(tmp_path / "e.jsonl", [conversation(t) for t in TOPICS[:4]])
    settings = SFTSettings(
        lora_rank=4, lora_targets=("q_proj",), epochs=2.0, max_length=256, eval_fraction=0.0
    )
    steps: list[int] = []

    def stop_after_three() -> bool:
        return len(steps) >= 3

    def record(point: sft_train.SFTProgress) -> None:
        if point.loss is not None:
            steps.append(point.step)

    common: dict[str, Any] = dict(
        model_dir=smollm2_dir, export_path=export, output_dir=tmp_path / "out", settings=settings
    )
    first = sft_train.sft_train(**common, progress=record, should_stop=stop_after_three)
    assert first.status == "cancelled" and first.adapter_dir is None
    # The request is seen at the end of the step in flight (the fourth), which is saved.
    assert first.checkpoint_dir is not None and first.checkpoint_dir.name == "checkpoint-4"

    second = sft_train.sft_train(**common, progress=record, resume=True)
    assert second.status == "completed"
    assert second.manifest["resumed_from"] == str(first.checkpoint_dir)
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]  # 4 records × 2 epochs, none repeated
