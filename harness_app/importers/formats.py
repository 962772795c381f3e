"""Which reader opens a benchmark: by format name, after checking the split."""

from __future__ import annotations

import re
from pathlib import Path

from harness_app.importers.beir import BeirSource
from harness_app.importers.hotpotqa import HotpotQASource
from harness_app.importers.records import ImportRejected, Source

SPLIT_PATTERN = r"\A[A-Za-z0-9_-][A-Za-z0-9_.-]*\Z"  # it names a file: qrels/<split>.tsv


def source_open(path: Path, *, fmt: str, split: str) -> Source:
    if not re.match(SPLIT_PATTERN, split):
        raise ImportRejected(f"split {split!r}: use letters, digits, '.', '_' or '-'")
    if fmt == "beir":
        if not path.is_dir():
            raise ImportRejected(f"{path} is not a folder; a BEIR benchmark is a folder")
        return BeirSource(path, split)
    if fmt == "hotpotqa":
        return HotpotQASource(path)
    raise ImportRejected(f"unknown format {fmt!r}; use beir or hotpotqa")
