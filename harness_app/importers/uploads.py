"""Uploaded files: a zip unpacked safely into a benchmark folder, or a .json/.jsonl as is."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from harness_app.importers.browsecomp import QREL_FILES, QREL_FOLDERS, QUERY_FILES
from harness_app.importers.formats import FOLDER_FORMATS, format_detect
from harness_app.importers.frames import PAGES_FILE, QUESTION_SUFFIXES
from harness_app.importers.records import ImportRejected

MAX_UNZIPPED_BYTES = 8 * 1024**3
READ_CHUNK = 1024 * 1024


def _beir_member(relative: PurePosixPath) -> bool:
    return relative.parts in (("corpus.jsonl",), ("queries.jsonl",)) or (
        len(relative.parts) == 2 and relative.parts[0] == "qrels" and relative.suffix == ".tsv"
    )


def _browsecomp_member(relative: PurePosixPath) -> bool:
    if relative.parts in (("corpus.jsonl",), *((name,) for name in QUERY_FILES)):
        return True
    return relative.name in QREL_FILES and str(relative.parent) in (".", *QREL_FOLDERS[1:])


def _frames_member(relative: PurePosixPath) -> bool:
    return len(relative.parts) == 1 and relative.suffix.lower() in QUESTION_SUFFIXES


# format -> (the file that marks the folder's root, which files under it are unpacked)
ZIP_LAYOUTS: dict[str, tuple[str, Callable[[PurePosixPath], bool]]] = {
    "beir": ("corpus.jsonl", _beir_member),
    "browsecomp-plus": ("corpus.jsonl", _browsecomp_member),
    "frames": (PAGES_FILE, _frames_member),
}


def zip_unpack(archive: Path, destination: Path, fmt: str = "beir") -> Path:
    """Extract the files of a `fmt` folder from a zip into `destination`; returns it.

    The folder is wherever the shallowest marker file sits (corpus.jsonl, or pages.jsonl
    for frames). Only that format's files are written, names are checked so nothing lands
    outside `destination`, and the total is capped whatever the zip headers claim.
    """
    if fmt not in ZIP_LAYOUTS:
        raise ImportRejected(f"a {fmt} benchmark is one file: upload it as it is, not zipped")
    marker, wanted = ZIP_LAYOUTS[fmt]
    try:
        with zipfile.ZipFile(archive) as bundle:
            root = _zip_root(bundle, marker)
            budget = MAX_UNZIPPED_BYTES
            for info in bundle.infolist():
                relative = _zip_member(info, root)
                if relative is not None and wanted(relative):
                    budget = _zip_extract(bundle, info, destination / relative, budget)
    except zipfile.BadZipFile as exc:
        raise ImportRejected(f"{archive.name} is not a readable zip file ({exc})") from None
    return destination


def zip_format(archive: Path) -> str:
    """The format of a zipped folder: pages.jsonl → frames; a corpus.jsonl whose first
    record has `docid` (or a browsecomp_plus_decrypted.jsonl) → browsecomp-plus; else beir."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            names = [PurePosixPath(n) for n in bundle.namelist()]
            if any(n.name == PAGES_FILE for n in names):
                return "frames"
            if any(n.name == QUERY_FILES[1] for n in names):
                return "browsecomp-plus"
            if not any(n.name == "corpus.jsonl" for n in names):
                raise ImportRejected(
                    f"{archive.name}: the zip holds no corpus.jsonl (a BEIR or BrowseComp-Plus "
                    f"folder) or {PAGES_FILE} (a FRAMES folder)"
                )
            root = _zip_root(bundle, "corpus.jsonl")
            with bundle.open(str(root / "corpus.jsonl") if root.parts else "corpus.jsonl") as f:
                first = f.readline(1024 * 1024).decode("utf-8", "replace")
    except zipfile.BadZipFile as exc:
        raise ImportRejected(f"{archive.name} is not a readable zip file ({exc})") from None
    except KeyError:
        return "beir"
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return "beir"  # the BEIR reader reports the line
    return "browsecomp-plus" if isinstance(row, dict) and "docid" in row else "beir"


def _zip_root(bundle: zipfile.ZipFile, marker: str) -> PurePosixPath:
    found = [PurePosixPath(n) for n in bundle.namelist() if PurePosixPath(n).name == marker]
    if not found:
        raise ImportRejected(f"the zip holds no {marker} (expected a benchmark folder)")
    return min(found, key=lambda p: len(p.parts)).parent


def _zip_member(info: zipfile.ZipInfo, root: PurePosixPath) -> PurePosixPath | None:
    name = PurePosixPath(info.filename)
    if info.is_dir() or name.is_absolute() or ".." in name.parts:
        return None
    try:
        return name.relative_to(root)
    except ValueError:
        return None


def _zip_extract(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: int) -> int:
    target.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open(info) as source, open(target, "wb") as sink:
        while chunk := source.read(READ_CHUNK):
            budget -= len(chunk)
            if budget < 0:
                raise ImportRejected(f"the zip unpacks to more than {MAX_UNZIPPED_BYTES} bytes")
            sink.write(chunk)
    return budget


UPLOAD_FORMATS = {".zip": FOLDER_FORMATS, ".json": ("hotpotqa", "2wikimultihopqa"),
                  ".jsonl": ("musique", "2wikimultihopqa")}  # fmt: skip


def upload_format(upload: Path, fmt: str = "auto") -> str:
    """The format an uploaded file is read as: `fmt`, checked against the file's kind, or
    detected from its layout or first record when `fmt` is "auto"."""
    suffix = upload.suffix.lower()
    if suffix not in UPLOAD_FORMATS:
        raise ImportRejected(f"{upload.name}: upload a .zip of a folder, or a .json or .jsonl file")
    if fmt == "auto":
        fmt = zip_format(upload) if suffix == ".zip" else format_detect(upload)
    if fmt not in UPLOAD_FORMATS[suffix]:
        kinds = ", ".join(UPLOAD_FORMATS[suffix])
        raise ImportRejected(f"a {suffix} upload is read as {kinds}, not {fmt}")
    return fmt


def upload_source_path(upload: Path, workdir: Path, fmt: str) -> Path:
    """The path to import for an uploaded file: a zip is unpacked into `workdir`."""
    if upload.suffix.lower() != ".zip":
        return upload
    if workdir.exists():
        shutil.rmtree(workdir)  # a retried job starts from a clean folder
    return zip_unpack(upload, workdir, fmt)
