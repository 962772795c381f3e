"""Which reader opens a benchmark: by format name, after checking the split, or detected."""

from __future__ import annotations

import re
from pathlib import Path

from harness_app.harness.beir import BeirFormatError
from harness_app.importers.beir import BeirSource
from harness_app.importers.browsecomp import BrowseCompPlusSource
from harness_app.importers.frames import PAGES_FILE, FramesSource
from harness_app.importers.hotpotqa import HotpotQASource
from harness_app.importers.musique import MuSiQueSource
from harness_app.importers.paragraphs import json_records
from harness_app.importers.records import ImportRejected, Source
from harness_app.importers.twowiki import TwoWikiSource

SPLIT_PATTERN = r"\A[A-Za-z0-9_-][A-Za-z0-9_.-]*\Z"  # it names a file: qrels/<split>.tsv
FORMATS = ("beir", "hotpotqa", "musique", "2wikimultihopqa", "browsecomp-plus", "frames")
FOLDER_FORMATS = ("beir", "browsecomp-plus", "frames")


def source_open(path: Path, *, fmt: str, split: str) -> Source:
    if not re.match(SPLIT_PATTERN, split):
        raise ImportRejected(f"split {split!r}: use letters, digits, '.', '_' or '-'")
    if fmt in FOLDER_FORMATS and not path.is_dir():
        raise ImportRejected(f"{path} is not a folder; a {fmt} benchmark is a folder")
    if fmt == "beir":
        return BeirSource(path, split)
    if fmt == "browsecomp-plus":
        return BrowseCompPlusSource(path)
    if fmt == "frames":
        return FramesSource(path)
    if fmt == "hotpotqa":
        return HotpotQASource(path)
    if fmt == "musique":
        return MuSiQueSource(path)
    if fmt == "2wikimultihopqa":
        return TwoWikiSource(path)
    raise ImportRejected(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def format_detect(path: Path) -> str:
    """The format of a folder or file, where its layout or first record leaves no doubt.

    Folders: pages.jsonl → frames; a corpus.jsonl whose first record has `docid` (or a
    browsecomp_plus_decrypted.jsonl) → browsecomp-plus; otherwise beir. Files: a first
    record with `paragraphs` → musique; with `evidences`, or a .jsonl with `context` and
    `supporting_facts` → 2wikimultihopqa; any other .json → hotpotqa.
    """
    if path.is_dir():
        if (path / PAGES_FILE).is_file():
            return "frames"
        browsecomp = (path / "browsecomp_plus_decrypted.jsonl").is_file()
        if browsecomp or "docid" in first_record_keys(path / "corpus.jsonl"):
            return "browsecomp-plus"
        return "beir"
    if not path.is_file():
        raise ImportRejected(f"no file or folder at {path}")
    suffix = path.suffix.lower()
    keys = first_record_keys(path) if suffix in (".json", ".jsonl") else set()
    if "paragraphs" in keys:
        return "musique"
    if "evidences" in keys or (suffix == ".jsonl" and {"context", "supporting_facts"} <= keys):
        return "2wikimultihopqa"
    if suffix == ".json":
        return "hotpotqa"
    raise ImportRejected(
        f"{path.name}: can't tell the benchmark format from its first record; "
        f"choose one of {', '.join(FORMATS)}"
    )


def first_record_keys(path: Path) -> set[str]:
    """The keys of a JSONL file's or JSON array's first object (none if unreadable: the
    reader chosen then reports the problem with its line)."""
    if not path.is_file():
        return set()
    try:
        for _, _, value in json_records(path):
            return set(value) if isinstance(value, dict) else set()
    except BeirFormatError:
        pass
    return set()
