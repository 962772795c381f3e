"""Export a rollout batch as an RL training batch: `manage.py rl_export --batch ID --out F`,
or a harness group's runs (`--harness-group ID`: one GRPO group, rewards from its evaluation).

Rewards, group-relative advantages and token-faithful sequences, one Parquet row per
sequence (training/rl/parquet.py); what was left out, and why, is printed and stored in
the file's metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness_app.harness.llm.reconstruct import PREFIX_MERGE, strategy_clean
from training.rl.advantages import AdvantageSettings
from training.rl.batches import MODES, BatchBuild
from training.rl.samples import rl_samples_for_batch, rl_samples_for_harness_group
from trajectories.models import HarnessGroup, RolloutBatch


def export_metadata(
    source: RolloutBatch | HarnessGroup, build: BatchBuild, options: dict[str, Any]
) -> dict[str, Any]:
    if isinstance(source, HarnessGroup):
        origin: dict[str, Any] = {"source": "harness_group", "harness_group_id": source.pk}
    else:
        origin = {"source": "rollout_batch", "batch_id": source.pk}
    return {
        **origin,
        "mode": strategy_clean(options["mode"], field="--mode"),
        "normalize_std": options["normalize_std"],
        "drop_zero_variance": not options["keep_zero_variance"],
        "kept_groups": build.kept_groups,
        "dropped_groups": build.dropped_groups,
        "exclusions": [{"episode_id": e.episode_id, "reason": e.reason} for e in build.exclusions],
        "chain_breaks": len(build.breaks),
    }


class Command(BaseCommand):
    help = "Write a rollout batch's or a harness group's RL rows (rewards, advantages) as Parquet."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--batch", type=int, help="the RolloutBatch id")
        source.add_argument(
            "--harness-group", type=int, help="the HarnessGroup id (its runs: one GRPO group)"
        )
        parser.add_argument("--out", required=True, type=Path, help="the .parquet file to write")
        parser.add_argument(
            "--mode",
            choices=MODES,
            default=PREFIX_MERGE,
            help="reconstruction strategy (prefix and request are aliases)",
        )
        parser.add_argument(
            "--normalize-std", action="store_true", help="divide advantages by the group std"
        )
        parser.add_argument(
            "--keep-zero-variance",
            action="store_true",
            help="keep groups whose rewards are all equal (their advantages are all 0)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            from training.rl.parquet import write_rl_parquet
        except ImportError as exc:
            raise CommandError(f"rl_export needs pyarrow (the 'train' extra): {exc}") from None
        out: Path = options["out"]
        if out.is_dir():
            raise CommandError(f"--out {out} is a folder; name a .parquet file")
        settings = AdvantageSettings(
            normalize_std=options["normalize_std"],
            drop_zero_variance=not options["keep_zero_variance"],
        )
        source, build = self._build(options, settings)
        rows = write_rl_parquet(build.sequences, out, export_metadata(source, build, options))
        self.stdout.write(self._summary(source, build, rows, out))

    def _build(
        self, options: dict[str, Any], settings: AdvantageSettings
    ) -> tuple[RolloutBatch | HarnessGroup, BatchBuild]:
        if options["harness_group"] is not None:
            group = HarnessGroup.objects.filter(pk=options["harness_group"]).first()
            if group is None:
                raise CommandError(f"--harness-group {options['harness_group']}: no such group")
            return group, rl_samples_for_harness_group(
                group=group, settings=settings, reconstruction=options["mode"]
            )
        batch = RolloutBatch.objects.filter(pk=options["batch"]).first()
        if batch is None:
            raise CommandError(f"--batch {options['batch']}: no such rollout batch")
        return batch, rl_samples_for_batch(batch=batch, settings=settings, mode=options["mode"])

    def _summary(
        self, source: RolloutBatch | HarnessGroup, build: BatchBuild, rows: int, out: Path
    ) -> str:
        excluded = ", ".join(f"{k} {v}" for k, v in sorted(build.exclusion_counts().items()))
        name = "harness group" if isinstance(source, HarnessGroup) else "batch"
        return (
            f"{name} {source.pk}: {rows} sequences from {build.episodes} episodes, "
            f"{len(build.kept_groups)} groups kept, {len(build.dropped_groups)} dropped "
            f"(zero variance); excluded: {excluded or 'none'}; "
            f"{len(build.breaks)} chain breaks -> {out}"
        )
