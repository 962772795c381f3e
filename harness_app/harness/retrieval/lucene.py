"""BM25 exactly as Lucene 9's BM25Similarity computes it (the scorer behind Anserini).

    idf(t)     = ln(1 + (N - df + 0.5) / (df + 0.5))
    norm(d)    = k1 * (1 - b + b * L(d) / avgdl)
    w(t, d)    = idf(t) * tf / (tf + norm(d))

N counts the documents with at least one term and avgdl is total terms / N. Lucene dropped
the constant (k1 + 1) numerator factor in version 8; ranking is unchanged, and leaving it out
keeps our scores equal to Anserini's. L(d) is the document's length after a lossy one-byte
encoding (SmallFloat.intToByte4): exact below 24 terms, then 4 significant bits. Reproducing
that quantisation is what makes the scores match Lucene's rather than merely resemble them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Byte values below this encode lengths exactly; the rest hold a 3-bit mantissa and a shift.
# It is 255 minus the code of the largest int, so all 256 byte values are used.
_EXACT_BELOW = 24


def _int4_decode(code: int) -> int:
    mantissa, shift = code & 0x07, (code >> 3) - 1
    return mantissa if shift < 0 else (mantissa | 0x08) << shift


def encode_lengths(lengths: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Document lengths -> Lucene's one-byte norms (SmallFloat.intToByte4), vectorised."""
    values = np.asarray(lengths, dtype=np.int64)
    if values.size and values.min() < 0:
        raise ValueError("document lengths must be non-negative")
    rest = np.maximum(values - _EXACT_BELOW, 0)
    # bit length via frexp is exact for the integers we meet (< 2**53)
    bits = np.frexp(rest.astype(np.float64))[1].astype(np.int64)
    shift = np.maximum(bits - 4, 0)
    normal = ((rest >> shift) & 0x07) | ((shift + 1) << 3)
    code = np.where(bits < 4, rest, normal)
    return np.where(values < _EXACT_BELOW, values, _EXACT_BELOW + code).astype(np.uint8)


def decoded_lengths() -> npt.NDArray[np.float64]:
    """The length each of the 256 norm bytes stands for (SmallFloat.byte4ToInt)."""
    table = [
        float(i if i < _EXACT_BELOW else _EXACT_BELOW + _int4_decode(i - _EXACT_BELOW))
        for i in range(256)
    ]
    return np.array(table)


def norm_table(k1: float, b: float, avgdl: float) -> npt.NDArray[np.float32]:
    """k1 * (1 - b + b * L / avgdl) for each norm byte, in float32 as Lucene caches it."""
    lengths = decoded_lengths().astype(np.float32)
    k1_, b_, avg = np.float32(k1), np.float32(b), np.float32(avgdl)
    table: npt.NDArray[np.float32] = k1_ * ((np.float32(1) - b_) + b_ * lengths / avg)
    return table


def idf(doc_freq: npt.ArrayLike, doc_count: int) -> npt.NDArray[np.float32]:
    """Lucene's BM25 idf, always positive (the 1 + keeps very common terms above zero)."""
    df = np.asarray(doc_freq, dtype=np.float64)
    return np.log1p((doc_count - df + 0.5) / (df + 0.5)).astype(np.float32)


def term_weights(
    tf: npt.ArrayLike, norms: npt.ArrayLike, term_idf: npt.ArrayLike
) -> npt.NDArray[np.float32]:
    """w(t, d) for aligned arrays of tf, norm(d) (from norm_table) and idf(t)."""
    tf32 = np.asarray(tf, dtype=np.float32)
    weights: npt.NDArray[np.float32] = (
        np.asarray(term_idf, dtype=np.float32) * tf32 / (tf32 + np.asarray(norms, np.float32))
    )
    return weights
