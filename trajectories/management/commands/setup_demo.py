"""Create the demo logins, the demo benchmark with its index, and two demo batches, for
`make run`. It lives in trajectories, the app that owns rollouts, as it queues batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

import harness_app
from harness_app import indexes
from harness_app.models import Benchmark, BenchmarkSource, Corpus, PolicyConfig, PolicyKind
from harness_app.roles import Role
from harness_app.services.benchmarks import benchmark_import
from harness_app.services.users import user_ensure
from trajectories.models import RolloutBatch
from trajectories.services.rollouts import batch_create

DEMO_USERS = (
    # username, password, role, staff
    ("researcher", "harness-demo", Role.RESEARCHER, True),
    ("annotator", "harness-demo", Role.ANNOTATOR, False),
)
DEMO_DATA = Path(harness_app.__file__).resolve().parent / "demo_data"
DEMO_NAME = "demo"


class Command(BaseCommand):
    help = "Create the demo logins and load the demo benchmark and its index (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        for username, password, role, staff in DEMO_USERS:
            _, created = user_ensure(
                username=username, password=password, role=role, is_staff=staff
            )
            state = "created" if created else "exists, password unchanged"
            self.stdout.write(f"  login {username} / {password}  ({role.label.lower()}, {state})")
        self._demo_benchmark()
        self._demo_rollouts()

    def _demo_benchmark(self) -> None:
        # replace=True: a newer demo_data/ swaps the old demo out; identical data is a no-op.
        result = benchmark_import(
            path=DEMO_DATA,
            name=DEMO_NAME,
            fmt="beir",
            split="test",
            replace=True,
            source=BenchmarkSource.DEMO,
        )
        self.stdout.write(f"  {result.describe(DEMO_NAME)}")
        corpus = Corpus.objects.get(pk=result.corpus_id)
        index, built = indexes.corpus_index_ensure(corpus)
        action = "built" if built else "already built"
        self.stdout.write(f"  index of corpus {corpus.name!r} {action}: {index.directory}")

    def _demo_rollouts(self) -> None:
        """Queue two baseline batches once (full, and without the evidence graph) so the
        dashboard, viewer and compare pages have episodes; the worker runs them in seconds."""
        benchmark = Benchmark.objects.get(name=DEMO_NAME)
        if RolloutBatch.objects.filter(benchmark=benchmark).exists():
            self.stdout.write("  demo rollouts exist")
            return
        policy, _ = PolicyConfig.objects.get_or_create(
            name="baseline", defaults={"kind": PolicyKind.BASELINE}
        )
        for ablate, samples in (((), 2), (("evidence_graph",), 1)):
            batch = batch_create(
                benchmark=benchmark, policy=policy, samples_per_query=samples, ablate=ablate
            )
            self.stdout.write(
                f"  queued demo batch {batch.pk} ({batch.ablation_label}): "
                f"{batch.episodes_total} baseline episodes"
            )
