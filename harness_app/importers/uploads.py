"""Uploaded files: a zip unpacked safely into a BEIR folder, or a HotpotQA .json as is."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path, PurePosixPath

from harness_app.importers.records import ImportRejected

MAX_UNZIPPED_BYTES = 8 * 1024**3
READ_CHUNK = 1024 * 1024


def zip_unpack(archive: Path, destination: Path) -> Path:
    """Extract the BEIR files of a zip into `destination`; returns the BEIR folder.

    The folder is wherever the shallowest corpus.jsonl sits. Only corpus.jsonl,
    queries.jsonl and qrels/*.tsv are written, names are checked so nothing lands outside
    `destination`, and the total is capped whatever the zip headers claim.
    """
    try:
        with zipfile.ZipFile(archive) as bundle:
            root = _zip_root(bundle)
            budget = MAX_UNZIPPED_BYTES
            for info in bundle.infolist():
                relative = _zip_member(info, root)
                if relative is not None:
                    budget = _zip_extract(bundle, info, destination / relative, budget)
    except zipfile.BadZipFile as exc:
        raise ImportRejected(f"{archive.name} is not a readable zip file ({exc})") from None
    return destination


def _zip_root(bundle: zipfile.ZipFile) -> PurePosixPath:
    corpora = [
        PurePosixPath(n) for n in bundle.namelist() if PurePosixPath(n).name == "corpus.jsonl"
    ]
    if not corpora:
        raise ImportRejected("the zip holds no corpus.jsonl (expected a BEIR folder)")
    return min(corpora, key=lambda p: len(p.parts)).parent


def _zip_member(info: zipfile.ZipInfo, root: PurePosixPath) -> PurePosixPath | None:
    name = PurePosixPath(info.filename)
    if info.is_dir() or name.is_absolute() or ".." in name.parts:
        return None
    try:
        relative = name.relative_to(root)
    except ValueError:
        return None
    wanted = relative.parts in (("corpus.jsonl",), ("queries.jsonl",)) or (
        len(relative.parts) == 2 and relative.parts[0] == "qrels" and relative.suffix == ".tsv"
    )
    return relative if wanted else None


def _zip_extract(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int) -> int:
    target.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open(info) as source, open(target, "wb") as sink:
        while chunk := source.read(READ_CHUNK):
            budget -= len(chunk)
            if budget < 0:
                raise ImportRejected(f"the zip unpacks to more than {MAX_UNZIPPED_BYTES} bytes")
            sink.write(chunk)
    return budget


def upload_source_path(upload: Path, workdir: Path) -> tuple[Path, str]:
    """(path to import, format) for an uploaded file: a zip is a BEIR folder, .json HotpotQA."""
    suffix = upload.suffix.lower()
    if suffix == ".zip":
        if workdir.exists():
            shutil.rmtree(workdir)  # a retried job starts from a clean folder
        return zip_unpack(upload, workdir), "beir"
    if suffix == ".json":
        return upload, "hotpotqa"
    raise ImportRejected(f"{upload.name}: upload a .zip of a BEIR folder or a HotpotQA .json")
