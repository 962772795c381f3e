"""On-disk string tables and the document store, read through memory maps.

Everything here is written once while streaming and then opened read-only with mmap, so
any number of worker processes share one page-cache copy and opening costs nothing.

- `StringTable`: strings in insertion order (one UTF-8 blob + int64 offsets) plus a sorted
  array of 64-bit hashes with the position each came from, so a lookup is one vectorised
  `searchsorted` and one comparison; no dict of a million ids has to be built at load.
- `DocumentStore`: titles and texts in one UTF-8 blob with 2N+1 offsets.
- `ContentHasher`: the corpus content hash that keys cached indexes.
"""

from __future__ import annotations

import hashlib
import itertools
import mmap
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from harness_app.harness.types import Document

Int64Array = npt.NDArray[np.int64]
_CHUNK = 4096  # offsets read per step when iterating, to keep numpy overhead off each item


def _digest(encoded: bytes) -> bytes:
    """The 8 bytes a string table stores per string and a lookup compares: one definition
    for the writer and every reader (a little-endian uint64 read as a number)."""
    return hashlib.blake2b(encoded, digest_size=8).digest()


def string_hash(value: str) -> int:
    """A stable 64-bit hash (Python's hash() is salted per process, so it can't be stored)."""
    return int.from_bytes(_digest(value.encode("utf-8", "surrogatepass")), "little")


def string_hashes(values: Sequence[str]) -> npt.NDArray[np.uint64]:
    """`string_hash` of each of `values`, as one array (without a Python int each)."""
    return _hashes_of([value.encode("utf-8", "surrogatepass") for value in values])


def lookup_keys(values: Sequence[str]) -> tuple[Any, Any, Any]:
    """What a compiled lookup (kernel.py) takes for `values`: their hashes, their UTF-8
    bytes end to end, and where each one starts and ends in those bytes."""
    encoded = [value.encode("utf-8", "surrogatepass") for value in values]
    bounds = np.fromiter(accumulate(map(len, encoded), initial=0), np.int64, len(encoded) + 1)
    return _hashes_of(encoded), np.frombuffer(b"".join(encoded), np.uint8), bounds


def _hashes_of(encoded: list[bytes]) -> npt.NDArray[np.uint64]:
    digests = b"".join(map(_digest, encoded))
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64, copy=False)


class ContentHasher:
    """sha256 over every document's id, title and text, each length-prefixed.

    The length prefix keeps ("ab", "c") and ("a", "bc") apart. Feeding documents one at a
    time lets the index builder hash the corpus in the same pass that indexes it.
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256(b"harness-corpus-v1")
        self.documents = 0

    def add_encoded(self, *fields: bytes) -> None:
        for field in fields:
            self._sha.update(len(field).to_bytes(8, "little"))
            self._sha.update(field)
        self.documents += 1

    def add(self, doc: Document) -> None:
        self.add_encoded(*encode_document(doc))

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def encode_document(doc: Document) -> tuple[bytes, bytes, bytes]:
    # surrogatepass: a lone surrogate (from a lenient JSON decoder) must not abort a build.
    return (
        doc.doc_id.encode("utf-8", "surrogatepass"),
        doc.title.encode("utf-8", "surrogatepass"),
        doc.text.encode("utf-8", "surrogatepass"),
    )


def corpus_content_hash(documents: Iterable[Document]) -> str:
    """The content hash `BM25Index.content_hash` is compared with, computed by streaming."""
    hasher = ContentHasher()
    for doc in documents:
        hasher.add(doc)
    return hasher.hexdigest()


def open_blob(path: Path) -> mmap.mmap | bytes:
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return b""  # mmap refuses empty files
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def load_array(path: Path) -> Any:
    """A read-only memory-mapped .npy, as a plain ndarray view of the mapping.

    Slicing an np.memmap costs a few microseconds of Python-level bookkeeping per slice
    (its __getitem__ and __array_finalize__); a plain view of the same pages costs none,
    and a query slices several times per term.
    """
    return np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))


class StringTableWriter:
    """Appends strings to `<name>.bin`; `close()` writes the offsets and the hash index."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self._blob: BinaryIO = open(directory / f"{name}.bin", "wb")  # noqa: SIM115
        self._offsets = array("q", [0])
        self._hashes = array("Q")

    def append_encoded(self, encoded: bytes) -> None:
        self._blob.write(encoded)
        self._offsets.append(self._offsets[-1] + len(encoded))
        self._hashes.append(int.from_bytes(_digest(encoded), "little"))

    def extend(self, values: Iterable[str]) -> None:
        for value in values:
            self.append_encoded(value.encode("utf-8", "surrogatepass"))

    def close(self) -> None:
        self._blob.close()
        hashes = np.frombuffer(self._hashes, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        np.save(self.directory / f"{self.name}.offsets.npy", np.frombuffer(self._offsets, np.int64))
        np.save(self.directory / f"{self.name}.hashes.npy", hashes[order])
        np.save(self.directory / f"{self.name}.order.npy", order.astype(np.int64))


class StringTable:
    """Read side of `StringTableWriter`: position -> string and string -> position."""

    def __init__(self, directory: Path, name: str) -> None:
        self._blob = open_blob(directory / f"{name}.bin")
        self._offsets = load_array(directory / f"{name}.offsets.npy")
        self._hashes = load_array(directory / f"{name}.hashes.npy")
        self._order = load_array(directory / f"{name}.order.npy")
        self._blob_bytes: Any = None  # the blob as a uint8 array, for lookup_arrays
        size = len(self._offsets) - 1
        if size < 0 or len(self._hashes) != size or len(self._order) != size:
            raise ValueError(f"string table {name!r} has inconsistent array lengths")
        if int(self._offsets[-1]) != len(self._blob):
            raise ValueError(f"string table {name!r}: blob size does not match its offsets")

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, position: int) -> str:
        start, end = self._offsets[position : position + 2].tolist()
        return bytes(self._blob[start:end]).decode("utf-8", "surrogatepass")

    def get_many(self, positions: Sequence[int] | Int64Array) -> list[str]:
        """The strings at `positions`, with one gather of their offsets."""
        index = np.asarray(positions, dtype=np.int64)
        starts, ends = self._offsets[index].tolist(), self._offsets[index + 1].tolist()
        blob = self._blob
        return [
            bytes(blob[a:b]).decode("utf-8", "surrogatepass")
            for a, b in zip(starts, ends, strict=True)
        ]

    def __iter__(self) -> Iterator[str]:
        for start_at in range(0, len(self), _CHUNK):
            bounds = self._offsets[start_at : start_at + _CHUNK + 1].tolist()
            for start, end in itertools.pairwise(bounds):
                yield bytes(self._blob[start:end]).decode("utf-8", "surrogatepass")

    def lookup(self, value: str) -> int:
        """Position of `value`, or -1."""
        return int(self.lookup_many([value])[0])

    def lookup_arrays(self) -> tuple[Any, Any, Any, Any]:
        """(sorted hashes, their positions, string offsets, strings as bytes): the table
        as a compiled lookup reads it (kernel.py)."""
        if self._blob_bytes is None:
            self._blob_bytes = np.frombuffer(self._blob, np.uint8)
        return self._hashes, self._order, self._offsets, self._blob_bytes

    def lookup_many(self, values: Sequence[str]) -> Int64Array:
        """Positions of `values` (-1 for each one absent), with one searchsorted for all."""
        found = np.full(len(values), -1, dtype=np.int64)
        if not values or not len(self):
            return found
        wanted = string_hashes(values)
        starts = np.minimum(np.searchsorted(self._hashes, wanted), len(self) - 1)
        maybe = np.flatnonzero(self._hashes[starts] == wanted)
        if not len(maybe):
            return found
        # The first string with the hash is almost always the one: check them all at once,
        # and scan on from there only after a 64-bit collision.
        first = self._order[starts[maybe]]
        for i, position, stored in zip(
            maybe.tolist(), first.tolist(), self.get_many(first), strict=True
        ):
            if stored == values[i]:
                found[i] = position
            else:
                found[i] = self._scan(values[i], wanted[i], int(starts[i]) + 1)
        return found

    def _scan(self, value: str, wanted: np.uint64, start: int) -> int:
        # Equal hashes are adjacent; compare the strings so a 64-bit collision can't mislead.
        while start < len(self._hashes) and self._hashes[start] == wanted:
            position = int(self._order[start])
            if self[position] == value:
                return position
            start += 1
        return -1


class DocumentStoreWriter:
    """Streams titles and texts to `docs.bin`; ids go to a StringTable named `ids`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ids = StringTableWriter(directory, "ids")
        self._blob: BinaryIO = open(directory / "docs.bin", "wb")  # noqa: SIM115
        self._offsets = array("q", [0])

    def append_encoded(self, doc_id: bytes, title: bytes, text: bytes) -> None:
        self.ids.append_encoded(doc_id)
        self._blob.write(title)
        self._blob.write(text)
        end = self._offsets[-1]
        self._offsets.append(end + len(title))
        self._offsets.append(end + len(title) + len(text))

    def close(self) -> None:
        self._blob.close()
        self.ids.close()
        np.save(self.directory / "docs.offsets.npy", np.frombuffer(self._offsets, np.int64))

    def check_unique_ids(self) -> None:
        """Raise ValueError naming a duplicated id (call after close())."""
        hashes = np.load(self.directory / "ids.hashes.npy", mmap_mode="r")
        suspects = np.flatnonzero(hashes[1:] == hashes[:-1])
        if len(suspects) == 0:
            return
        table = StringTable(self.directory, "ids")
        order = table._order
        for i in suspects.tolist():
            a, b = table[int(order[i])], table[int(order[i + 1])]
            if a == b:
                raise ValueError(f"duplicate document id {a!r}")


class DocumentStore:
    """Read side of `DocumentStoreWriter`."""

    def __init__(self, directory: Path) -> None:
        self.ids = StringTable(directory, "ids")
        self._blob = open_blob(directory / "docs.bin")
        self._offsets = load_array(directory / "docs.offsets.npy")
        if len(self._offsets) != 2 * len(self.ids) + 1:
            raise ValueError("document store offsets do not match the number of ids")
        if int(self._offsets[-1]) != len(self._blob):
            raise ValueError("document store blob size does not match its offsets")

    def __len__(self) -> int:
        return len(self.ids)

    def _decode(self, start: int, end: int) -> str:
        return bytes(self._blob[start:end]).decode("utf-8", "surrogatepass")

    def get(self, position: int) -> Document:
        start, middle, end = self._offsets[2 * position : 2 * position + 3].tolist()
        return Document(
            doc_id=self.ids[position],
            title=self._decode(start, middle),
            text=self._decode(middle, end),
        )

    def __iter__(self) -> Iterator[Document]:
        ids = iter(self.ids)
        for first in range(0, len(self), _CHUNK):
            bounds = self._offsets[2 * first : 2 * (first + _CHUNK) + 1].tolist()
            for i in range(0, len(bounds) - 1, 2):
                yield Document(
                    doc_id=next(ids),
                    title=self._decode(bounds[i], bounds[i + 1]),
                    text=self._decode(bounds[i + 1], bounds[i + 2]),
                )
