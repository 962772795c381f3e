"""RL batches as Parquet: one row per training sequence, the columns of `TrainSequence`.

Token ids are int32 and logprobs float32, the widths the rollouts were recorded in
(trajectories.models keeps them as int32/float32 blobs), so nothing is rounded on the way.
The batch's provenance (source batch, advantage settings, exclusions) rides in the file's
schema metadata under the key "harness_rl". docs/training-rl.md maps the columns onto
verl, slime, SkyRL and TRL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from training.rl.batches import TrainSequence

FORMAT_VERSION = 1
METADATA_KEY = b"harness_rl"

RL_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("group_id", pa.int64(), nullable=False),
        pa.field("episode_id", pa.int64(), nullable=False),
        pa.field("segment_idx", pa.int32(), nullable=False),
        pa.field("policy_version", pa.string(), nullable=False),
        pa.field("prompt_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),
        pa.field("rollout_logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("advantage", pa.float64(), nullable=False),
        pa.field("termination_reason", pa.string(), nullable=False),
    ]
)
COLUMNS = tuple(RL_SCHEMA.names)


def sequences_table(
    sequences: Iterable[TrainSequence], metadata: dict[str, Any] | None = None
) -> pa.Table:
    rows = list(sequences)
    columns = {name: [getattr(s, name) for s in rows] for name in COLUMNS}
    info = {"format_version": FORMAT_VERSION, **(metadata or {})}
    schema = RL_SCHEMA.with_metadata({METADATA_KEY: json.dumps(info, sort_keys=True)})
    return pa.Table.from_pydict(columns, schema=schema)


def write_rl_parquet(
    sequences: Iterable[TrainSequence], path: Path, metadata: dict[str, Any] | None = None
) -> int:
    """Write the rows; returns how many. The file appears whole or not at all."""
    table = sequences_table(sequences, metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    pq.write_table(table, partial, compression="zstd")
    os.replace(partial, path)
    return table.num_rows


def read_rl_metadata(path: Path) -> dict[str, Any]:
    raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY, b"{}")
    info: dict[str, Any] = json.loads(raw)
    return info


def read_rl_parquet(path: Path) -> list[TrainSequence]:
    """The rows back as sequences, e.g. for the built-in trainer in another process."""
    table = pq.read_table(path, columns=list(COLUMNS))
    return [TrainSequence(**row) for row in table.to_pylist()]
