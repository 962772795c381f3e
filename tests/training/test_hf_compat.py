"""An export loads with Hugging Face `datasets` and goes through TRL's SFT preparation.

No model or tokenizer is downloaded: a byte-level BPE tokenizer is trained on the export
in memory and given the project's own ChatML template with tools (scripts/llm/), and
SFTTrainer gets a one-layer model built from a config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import factories
from training.services.exports import sft_export_create, sft_export_run
from trajectories.services.annotations import annotation_bulk_apply

datasets = pytest.importorskip("datasets", reason="needs Hugging Face datasets")
trl = pytest.importorskip("trl", reason="needs TRL (pip install trl), which brings torch")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.django_db

TEMPLATE = Path(__file__).resolve().parents[2] / "scripts" / "llm" / "chat_template.jinja"
SPECIAL = ["<|im_start|>", "<|im_end|>", "<pad>"]


def _load(path: Path, cache: Path):
    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(cache))


@pytest.fixture
def export_file(demo_benchmark, baseline_policy, researcher) -> Path:
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    annotation_bulk_apply(actor=researcher, filters={"batch": batch.pk}, label="approve")
    export = sft_export_run(export_id=sft_export_create(enqueue=False).pk)
    return Path(export.file_path)


def _tokenizer(corpus: list[str]):
    model = tokenizers.models.BPE()
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>"
    )
    fast.chat_template = TEMPLATE.read_text()
    return fast


def test_export_loads_with_datasets_exactly_as_written(export_file, tmp_path):
    dataset = _load(export_file, tmp_path)
    written = [json.loads(line) for line in export_file.read_text().splitlines()]
    assert dataset.num_rows == len(written) == 2
    assert dataset[0]["messages"] == written[0]["messages"]
    assert dataset[0]["tools"] == written[0]["tools"]  # schemas not widened with nulls
    assert trl.data_utils.is_conversational(dataset[0])


def test_trl_renders_every_record_with_its_tools(export_file, tmp_path):
    dataset = _load(export_file, tmp_path)
    tokenizer = _tokenizer([export_file.read_text()])
    row = dataset[0]
    text = trl.data_utils.apply_chat_template(row, tokenizer, tools=row["tools"])["text"]
    assert '"name": "search_corpus"' in text  # the tool schemas reach the prompt
    assert text.count('<tool_call>\n{"name"') == sum(
        len(m.get("tool_calls") or []) for m in row["messages"] if m["role"] == "assistant"
    )
    assert text.count("<|im_start|>tool") == sum(m["role"] == "tool" for m in row["messages"])


def test_sft_trainer_prepares_the_dataset_and_takes_a_step(export_file, tmp_path):
    dataset = _load(export_file, tmp_path)
    tokenizer = _tokenizer([export_file.read_text()])
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
    )
    args = trl.SFTConfig(
        output_dir=str(tmp_path),
        max_length=256,
        max_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_steps=1,
    )
    trainer = trl.SFTTrainer(
        model=transformers.LlamaForCausalLM(config),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    prepared = trainer.train_dataset
    assert prepared.num_rows == 2 and max(len(r) for r in prepared["input_ids"]) <= 256
    result = trainer.train()
    assert result.global_step == 1
