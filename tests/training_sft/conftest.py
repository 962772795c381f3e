"""Fixtures for the SFT job tests: a done export of approved teacher episodes and the fake
trainer that stands in for training/sft/train.py (the weights stand-in, the fake model
server and the policy behind it are shared: tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests import factories
from tests.training_sft.fake_trainer import FakeTrainer
from training.models import ExportStatus, SFTExport
from training.services import sft_jobs
from training.services.exports import sft_export_create, sft_export_run
from trajectories.models import RolloutBatch
from trajectories.services.annotations import annotation_bulk_apply


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
