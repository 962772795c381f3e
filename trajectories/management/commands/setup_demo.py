"""Create the demo logins, the demo benchmark with its index, the sampled baseline's policy
config and two demo batches of it, for `make run`. It lives in trajectories, the app that
owns rollouts, as it queues batches."""

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
# The deterministic baseline plays every sample, run and ablation of a demo question the
# same way; its sampled variant (harness_app/harness/policies/sampled.py) does not, so the
# demo's groups, ablation matrices and evaluation runs show a spread.
DEMO_POLICY = "baseline_sampled"
DEMO_TEMPERATURE = 0.2
# (switched off, samples per query): a group of 4 per question, and verification off,
# which changes this policy's curated sets on the demo questions.
DEMO_BATCHES = (((), 4), (("verification",), 2))


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
        policy = self._demo_policy()
        self._demo_rollouts(policy)

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

    def _demo_policy(self) -> PolicyConfig:
        """The sampled baseline's config, beside the deterministic "baseline" (created by a
        migration), for the batch, matrix and evaluation forms to offer."""
        policy, created = PolicyConfig.objects.get_or_create(
            name=DEMO_POLICY,
            defaults={"kind": PolicyKind.BASELINE, "sampling": {"temperature": DEMO_TEMPERATURE}},
        )
        state = "created" if created else "exists"
        self.stdout.write(
            f"  policy {DEMO_POLICY} (the baseline at temperature "
            f"{policy.rule_temperature:g}, seeded per sample): {state}"
        )
        return policy

    def _demo_rollouts(self, policy: PolicyConfig) -> None:
        """Queue two batches of the sampled baseline once (the full harness in groups of 4,
        and without verification) so the dashboard, viewer, group and compare pages have
        episodes that differ; the worker runs them in seconds."""
        benchmark = Benchmark.objects.get(name=DEMO_NAME)
        if RolloutBatch.objects.filter(benchmark=benchmark).exists():
            self.stdout.write("  demo rollouts exist")
            return
        for ablate, samples in DEMO_BATCHES:
            batch = batch_create(
                benchmark=benchmark, policy=policy, samples_per_query=samples, ablate=ablate
            )
            self.stdout.write(
                f"  queued demo batch {batch.pk} ({batch.ablation_label}): "
                f"{batch.episodes_total} {DEMO_POLICY} episodes"
            )
