"""`make run` shows rollouts: setup_demo queues the demo batches once."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from trajectories.models import RolloutBatch

pytestmark = pytest.mark.django_db


def test_setup_demo_queues_demo_rollouts_once(capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as sent:
        call_command("setup_demo")
    labels = sorted(RolloutBatch.objects.values_list("ablation_label", flat=True))
    assert labels == ["-verification", "full"]
    assert sum(b.episodes_total for b in RolloutBatch.objects.all()) == 12 * 4 + 12 * 2
    assert {b.policy.name for b in RolloutBatch.objects.all()} == {"baseline_sampled"}
    # Each batch is sent through the job kernel once its transaction commits.
    batch_sends = [f for f in sent if f.__module__ == "harness_app.jobs"]
    assert len(batch_sends) == 2  # one enqueue per batch, after commit
    call_command("setup_demo")
    assert RolloutBatch.objects.count() == 2
    assert "demo rollouts exist" in capsys.readouterr().out
