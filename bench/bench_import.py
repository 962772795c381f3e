"""Import throughput: a synthetic BEIR corpus into the configured database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/harness_dev \
        .venv/bin/python bench/bench_import.py [--docs 1000000] [--index]

Generates the corpus into a temporary folder (streamed, never held in memory), imports it
into a throwaway test database (test_<name>, created and dropped here), and prints
documents per second for the check pass, the write pass and the whole import, plus the
peak resident memory of this process. --index also times the BM25 index build.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

WORDS = [
    *("orchard", "river", "harbour", "lamp", "grafter", "village", "charter", "steam"),
    *("packet", "festival", "company", "tide", "quay", "salt", "timber", "mining", "hill"),
    *("ship", "builder", "inventor", "bridge", "marsh", "moor", "town", "province", "canal"),
    *("mill", "granary", "bell", "tower", "market", "ferry", "lighthouse", "north", "south"),
]


def generate(folder: Path, docs: int, queries: int, seed: int = 7) -> None:
    """corpus.jsonl with ~60-word documents, queries.jsonl and qrels/test.tsv."""
    rng = random.Random(seed)
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for i in range(docs):
            text = " ".join(rng.choices(WORDS, k=60))
            title = " ".join(rng.choices(WORDS, k=3)).title()
            corpus.write(json.dumps({"_id": f"doc{i:08d}", "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as out:
        for q in range(queries):
            question = " ".join(rng.choices(WORDS, k=8)) + "?"
            out.write(
                json.dumps({"_id": f"q{q}", "text": question, "metadata": {"answer": "x"}}) + "\n"
            )
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q in range(queries):
            for doc in rng.sample(range(docs), 2):
                qrels.write(f"q{q}\tdoc{doc:08d}\t{rng.choice((1, 2))}\n")


class PhaseClock:
    """Records when each import phase started and ended, from the progress callback."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def __call__(self, state) -> None:
        now = time.perf_counter()
        self.first.setdefault(state.phase, now)
        self.last[state.phase] = now

    def seconds(self, phase: str) -> float:
        return self.last.get(phase, 0.0) - self.first.get(phase, 0.0)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def time_index_build(corpus, docs: int) -> None:
    """Build the corpus's BM25 index from the database, then delete it again."""
    import shutil

    from harness_app import indexes

    started = time.perf_counter()
    index, _ = indexes.corpus_index_ensure(corpus)
    took = time.perf_counter() - started
    rate = f"{docs / took:>10,.0f} docs/s"
    print(f"  index build {took:7.1f} s  {rate}, peak RSS {peak_rss_mib():.0f} MiB")
    shutil.rmtree(index.directory, ignore_errors=True)
    index.directory.with_name(index.directory.name + ".lock").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--index", action="store_true", help="also time the BM25 index build")
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection

    from harness_app.models import Corpus
    from harness_app.services.benchmarks import benchmark_import

    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        folder = Path(tmp) / "synthetic"
        started = time.perf_counter()
        generate(folder, args.docs, args.queries)
        size = (folder / "corpus.jsonl").stat().st_size
        took = time.perf_counter() - started
        print(f"generated {args.docs:,} documents ({size / 1e6:,.0f} MB) in {took:.1f} s")
        rss_before = peak_rss_mib()

        old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
        try:
            print(f"database: {connection.vendor} ({connection.settings_dict['NAME']})")
            clock = PhaseClock()
            started = time.perf_counter()
            result = benchmark_import(path=folder, name="synthetic", fmt="beir", progress=clock)
            total = time.perf_counter() - started
            check, write = clock.seconds("checking"), clock.seconds("writing")
            counts = f"{result.documents:,} documents, {result.queries:,} queries"
            print(f"imported {counts}, {result.qrels:,} qrels")
            print(f"  check pass  {check:7.1f} s  {args.docs / check:>10,.0f} docs/s")
            print(f"  write pass  {write:7.1f} s  {args.docs / write:>10,.0f} docs/s")
            print(f"  whole       {total:7.1f} s  {args.docs / total:>10,.0f} docs/s")
            print(
                f"  peak RSS    {peak_rss_mib():7.0f} MiB (before the import: {rss_before:.0f} MiB)"
            )
            if args.index:
                time_index_build(Corpus.objects.get(pk=result.corpus_id), args.docs)
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
