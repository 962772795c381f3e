"""Fixtures for the SFT job tests: a done export of approved teacher episodes, a folder that
passes for model weights, the fake model server jobs publish adapters to, and the fake
trainer that stands in for training/sft_train.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer
from tests.training_sft.fake_trainer import FakeTrainer
from training.models import ExportStatus, SFTExport
from training.services import sft_jobs
from training.services.sft_exports import sft_export_create, sft_export_run
from trajectories.models import RolloutBatch
from trajectories.services.annotations import annotation_bulk_apply


@pytest.fixture
def lora_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model="smollm2") as server:
        yield server


@pytest.fixture
def weights_dir(tmp_path: Path) -> Path:
    """A folder that looks like model weights to the create checks."""
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def llm_policy(lora_server: FakeOpenAIServer) -> PolicyConfig:
    return PolicyConfig.objects.create(
        name="smollm2",
        kind=PolicyKind.OPENAI,
        base_url=lora_server.base_url,
        model="smollm2",
        sampling={"temperature": 0.7, "max_tokens": 64},
    )


@pytest.fixture
def teacher_batch(demo_benchmark, baseline_policy, researcher) -> RolloutBatch:
    """A played batch marked as a teacher batch, its episodes approved."""
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=2)
    RolloutBatch.objects.filter(pk=batch.pk).update(teacher_rule={"curated_recall_min": 0.0})
    annotation_bulk_apply(actor=researcher, filters={"batch": batch.pk}, label="approve")
    return batch


@pytest.fixture
def export(teacher_batch) -> SFTExport:
    created = sft_export_create(enqueue=False)
    done = sft_export_run(export_id=created.pk)
    assert done is not None and done.status == ExportStatus.DONE and done.records == 2
    return done


@pytest.fixture
def fake_trainer(monkeypatch: pytest.MonkeyPatch) -> FakeTrainer:
    trainer = FakeTrainer()
    monkeypatch.setattr(sft_jobs, "trainer_module", lambda: trainer)
    return trainer
