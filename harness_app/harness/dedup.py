r"""Content-fingerprint near-duplicate detection: MinHash + LSH, confirmed by exact Jaccard.

A document's fingerprint is the set of its word 3-shingles (lower-cased `\w+` runs, so case
and punctuation do not matter; a text of fewer than three words is one shingle). Two documents
are near-duplicates when the Jaccard similarity of their shingle sets is at least the
threshold (0.85 by default).

Finding candidates must not cost O(documents shown) per hit, so each fingerprint gets a
64-value MinHash signature (multiply-shift hashing of CRC32 shingle hashes, in numpy) cut
into 16 LSH bands of 4 rows. A pair at Jaccard 0.85 shares at least one band with
probability 1 - (1 - 0.85^4)^16 > 0.9999; any pair sharing a band is then confirmed with the
exact Jaccard of the cached shingle sets, so a verdict never rests on the estimate and is
deterministic. Shingles and signatures are cached per document text.

Texts under `MIN_WORDS` words are never treated as duplicates: stubs such as "See also."
say too little for equal wording to mean equal content.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

SHINGLE_WORDS = 3
MIN_WORDS = 6
NUM_PERM = 64
BANDS = 16
ROWS = NUM_PERM // BANDS

# Fixed seeds: signatures must agree between processes so results replay exactly.
_rng = np.random.default_rng(20240617)
_MULT = (_rng.integers(1, 2**63, size=NUM_PERM, dtype=np.uint64) | np.uint64(1)).reshape(-1, 1)
_ADD = _rng.integers(0, 2**63, size=NUM_PERM, dtype=np.uint64).reshape(-1, 1)
_SHIFT = np.uint64(32)
# Cheaper than text.words (no possessive handling), which is all a fingerprint needs.
_WORD_RE = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    n_words: int
    shingles: frozenset[int]
    bands: tuple[bytes, ...]


@lru_cache(maxsize=16_384)
def fingerprint(text: str) -> Fingerprint:
    tokens = _WORD_RE.findall(text.lower())
    if len(tokens) < SHINGLE_WORDS:
        grams = [" ".join(tokens)]
    else:
        grams = [" ".join(tokens[i : i + SHINGLE_WORDS]) for i in range(len(tokens) - 2)]
    shingles = frozenset(zlib.crc32(g.encode()) for g in grams)
    return Fingerprint(len(tokens), shingles, bands_of(signature(shingles).tobytes()))


def signature(shingles: frozenset[int]) -> npt.NDArray[np.uint32]:
    """The NUM_PERM MinHash values (each below 2**32) of a shingle set."""
    values = np.fromiter(shingles, dtype=np.uint64, count=len(shingles)).reshape(1, -1)
    # Multiply-shift universal hashing: uint64 arithmetic wraps, keep the high 32 bits.
    hashed = (values * _MULT + _ADD) >> _SHIFT
    return np.asarray(hashed.min(axis=1), dtype=np.uint32)


# Each band key: the band's number (one byte), then its ROWS values' bytes.
_BAND_SLICES = tuple((bytes([b]), b * ROWS * 4, (b + 1) * ROWS * 4) for b in range(BANDS))


def bands_of(raw: bytes) -> tuple[bytes, ...]:
    """LSH band keys from a signature's bytes (NUM_PERM uint32 values, as `tobytes` gives)."""
    return tuple([number + raw[start:end] for number, start, end in _BAND_SLICES])


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class DedupIndex:
    """The documents already shown in one episode, searchable for near-duplicates.

    Lives on the harness rather than in HarnessState because it is derived data: it is
    rebuilt from the state's document memory when an episode is restored.
    """

    def __init__(self, threshold: float = 0.85) -> None:
        self.threshold = threshold
        self._buckets: dict[bytes, list[str]] = {}
        self._shingles: dict[str, frozenset[int]] = {}

    def __len__(self) -> int:
        return len(self._shingles)

    def near_duplicate_of(self, text: str) -> str | None:
        """The id of an indexed document whose text is a near-duplicate, if any."""
        return self.near_duplicate(fingerprint(text))

    def near_duplicate(self, fp: Fingerprint) -> str | None:
        """As `near_duplicate_of`, for a fingerprint already at hand."""
        if fp.n_words < MIN_WORDS:
            return None
        checked: set[str] = set()
        for band in fp.bands:
            for doc_id in self._buckets.get(band, ()):
                if doc_id in checked:
                    continue
                checked.add(doc_id)
                if jaccard(fp.shingles, self._shingles[doc_id]) >= self.threshold:
                    return doc_id
        return None

    def add(self, doc_id: str, text: str) -> None:
        if doc_id not in self._shingles:
            self.add_fingerprint(doc_id, fingerprint(text))

    def add_fingerprint(self, doc_id: str, fp: Fingerprint) -> None:
        if doc_id in self._shingles:
            return
        if fp.n_words < MIN_WORDS:
            return
        self._shingles[doc_id] = fp.shingles
        buckets = self._buckets
        for band in fp.bands:
            bucket = buckets.get(band)
            if bucket is None:
                buckets[band] = [doc_id]
            else:
                bucket.append(doc_id)
