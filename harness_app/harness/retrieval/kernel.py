"""Which scorer BM25Index ranks with: one compiled loop (Numba) or NumPy calls.

An unpruned query costs NumPy about 25 calls (slices, concatenations, `np.add.at`, a
cutoff, a scan, a sort), at 1 to 3 µs of call overhead each: at 10k documents that
overhead, not the arithmetic, is most of a query. The compiled scorer (_bm25_kernel.py)
does the same work in one call, with the same float32 arithmetic in the same order, so
both return the same hits with the same scores (tests/harness/test_bm25_kernel.py).

`BM25_KERNEL` chooses:

- `auto` (the default): the compiled scorer when Numba imports, else NumPy (logged once);
- `numba`: the compiled scorer, or a clear error when Numba is missing;
- `numpy`: NumPy only (no compile on a process's first query).

The first query of a process imports Numba and compiles the loop, or loads it from
Numba's cache on disk: about 0.5 s with the cache, 1 s without. Every later query, in any
thread, reuses it. Celery workers call `warm_up` before their pool forks, so that their
processes inherit the compiled loop instead of each paying for it on a first query.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

AUTO, NUMBA, NUMPY = "auto", "numba", "numpy"
KERNEL_MODES: tuple[str, ...] = (AUTO, NUMBA, NUMPY)


@dataclass(frozen=True)
class Kernel:
    """The compiled loops (_bm25_kernel.py has their arguments)."""

    # (docs, weights, rows, acc, excluded, k) -> (positions, scores), best first
    top_k: Callable[..., tuple[Any, Any]]
    # (hashes, order, offsets, blob, indptr, wanted, encoded, bounds) -> int64 (m, 3)
    term_rows: Callable[..., Any]


class KernelUnavailableError(ValueError):
    """BM25_KERNEL=numba, but Numba is not installed or cannot compile: a setting this
    installation cannot honour, hence a ValueError (as an unknown BM25_KERNEL is)."""


def kernel_mode(value: str | None = None) -> str:
    """`value`, else the BM25_KERNEL environment variable, else auto; checked."""
    mode = (value if value is not None else os.environ.get("BM25_KERNEL", "")).strip() or AUTO
    if mode not in KERNEL_MODES:
        raise ValueError(f"BM25_KERNEL={mode!r}: use {', '.join(KERNEL_MODES)}")
    return mode


_lock = threading.Lock()
_loaded: dict[str, Kernel | None] = {}


def load_kernel(mode: str | None = None) -> Kernel | None:
    """The compiled scorer, or None where NumPy is to rank (mode `numpy`, or `auto`
    without Numba). Imported once per process."""
    mode = kernel_mode(mode)
    if mode == NUMPY:
        return None
    with _lock:
        if mode not in _loaded:
            _loaded[mode] = _import(mode)
        return _loaded[mode]


def _import(mode: str) -> Kernel | None:
    try:
        from harness_app.harness.retrieval import _bm25_kernel
    except Exception as exc:  # ImportError, or Numba refusing this NumPy or platform
        if mode == NUMBA:
            raise KernelUnavailableError(
                f"BM25_KERNEL=numba, but the compiled scorer is unavailable ({exc}); "
                "install numba (pip install -e .) or set BM25_KERNEL=numpy"
            ) from exc
        log.warning("BM25 ranks with NumPy: the compiled scorer is unavailable (%s)", exc)
        return None
    return Kernel(_bm25_kernel.compiled_exhaustive_top_k, _bm25_kernel.compiled_term_rows)


def warm_up(mode: str | None = None) -> bool:
    """Load the scorer now and run it once; True when the compiled one is in use.

    The arguments have the types of a real query's (postings read-only, as memory-mapped),
    so the query reuses this compilation instead of adding another.
    """
    kernel = load_kernel(mode)
    if kernel is None:
        return False
    docs, weights = _read_only(np.zeros(1, np.int32)), _read_only(np.ones(1, np.float32))
    rows = np.array([[0, 1, 1, 0]], dtype=np.int64)
    kernel.top_k(docs, weights, rows, np.zeros(1, np.float32), np.empty(0, np.int64), 1)
    positions = _read_only(np.zeros(1, np.int64))
    kernel.term_rows(
        _read_only(np.zeros(1, np.uint64)),  # the vocabulary's hashes
        positions,  # its order
        _read_only(np.array([0, 1], np.int64)),  # its offsets
        np.frombuffer(b"a", np.uint8),  # its strings
        _read_only(np.array([0, 1], np.int64)),  # the postings' indptr
        np.frombuffer(bytes(8), np.uint64),  # wanted hashes
        np.frombuffer(b"a", np.uint8),  # wanted strings
        np.array([0, 1], np.int64),  # their bounds
    )
    return True


def _read_only(array: Any) -> Any:
    array.setflags(write=False)
    return array
