"""How long the evaluation runs' paired bootstrap takes (2000 resamples, the default), by the
number of paired queries. Pure Python, no database: `python bench/bench_evaluation_stats.py`."""

from __future__ import annotations

import random
import time

from harness_app.harness.stats import paired_bootstrap


def main() -> None:
    rng = random.Random(0)
    for n in (100, 500, 1000, 5000):
        a = {q: rng.random() for q in range(n)}
        b = {q: rng.random() for q in range(n)}
        started = time.perf_counter()
        result = paired_bootstrap(a, b)
        elapsed = time.perf_counter() - started
        assert result is not None
        width = result.ci_high - result.ci_low
        print(f"{n:>5} paired queries: {elapsed * 1000:8.1f} ms  (CI width {width:.4f})")


if __name__ == "__main__":
    main()
