"""Harness overhead per step, and WORKINGMEMORY size, on HotpotQA dev-500.

Prints figures, asserts nothing. Run from the project root:

    .venv/bin/python bench/bench_harness_step.py [--episodes 200] [--seed 7]
        [--analysis both|computed|stored]

- Overhead: wall time of `SearchHarness.step` minus the time spent inside the retriever
  (search, document lookups), over random but realistic episodes (a search first, then a
  weighted mix of every tool, some malformed calls). Retrieval is a small numpy BM25 written
  here so the figure does not depend on the production index. Grep scans the corpus in the
  harness itself, so it is reported on its own line and kept out of the headline figure.
- Analysis source: each shown document needs a query-independent analysis (sentences and
  their BM25 weights, MinHash fingerprint, entities; harness_app/harness/analysis.py).
  "computed": the retriever is the in-memory numpy BM25 below, which stores none, so the
  harness computes it at first sight and caches it per process (tests, ad-hoc retrievers).
  "stored": the retriever is the production BM25Index, built here into a temporary
  directory with the analysis precomputed (its build time and size are printed), so the
  harness reads it from the memory-mapped index. Its search and document lookups are
  subtracted like the numpy one's; reading the stored analysis is counted as harness time.
- Caches: the computed analysis (or the analyses decoded from the index), compressed
  views and WM lines are cached per process.
  "cold" clears those caches before every episode (documents never seen before in this
  process: for "computed", a corpus so large that documents never repeat; for "stored",
  what a fresh worker sees); "steady" lets them fill across distinct questions as a
  long-lived worker would; "hot" replays episodes already run, like the N samples of one
  GRPO group. The index files themselves stay in the OS page cache, as they do for
  workers sharing one index.
- GC: by default (`--gc worker`) the script sets the collector up as a worker does
  (harness_app/harness/gc_policy.py: gc.freeze() after loading, raised thresholds, and
  between two episodes a collection whose survivors are frozen). `--gc freeze` is what
  it did before issue 21.12 (gc.freeze() after loading, default thresholds): full
  collections over the filling caches then land inside steps and set the p99
  (docs/harness.md, "Garbage collection"). `--no-freeze` skips both.
- WM size: an episode that curates 30 documents in turn 1, then keeps acting, with the
  context limit lifted so it reaches turn 40. Tokens are estimated as chars/4 (the harness
  estimate); tiktoken's cl100k_base count is added when tiktoken is installed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness_app.harness import compress, dedup, gc_policy, graph, working_memory  # noqa: E402
from harness_app.harness.budget import estimate_tokens  # noqa: E402
from harness_app.harness.config import HarnessConfig  # noqa: E402
from harness_app.harness.env import SearchHarness  # noqa: E402
from harness_app.harness.retrieval import BM25Index  # noqa: E402
from harness_app.harness.text import analyze  # noqa: E402
from harness_app.harness.types import Document, QuerySpec, SearchHit, ToolCall  # noqa: E402

TAGS = ["very_high", "high", "fair", "low"]


def data_dir() -> Path:
    override = os.environ.get("HARNESS_SHARED_DATA")
    root = Path(override) if override else ROOT.parent / "shared" / "data"
    return root / "hotpotqa-dev500"


class NumpyBM25:
    """Plain BM25 (k1=0.9, b=0.4) over title + text with an inverted index in numpy."""

    def __init__(self, docs: list[Document]) -> None:
        self.docs = {d.doc_id: d for d in docs}
        self.ids = [d.doc_id for d in docs]
        postings: dict[str, Counter[int]] = defaultdict(Counter)
        lengths = np.zeros(len(docs))
        for i, doc in enumerate(docs):
            terms = analyze(f"{doc.title} {doc.text}")
            lengths[i] = len(terms)
            for term in terms:
                postings[term][i] += 1
        avg = lengths.mean()
        self.index: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, counts in postings.items():
            rows = np.fromiter(counts.keys(), dtype=np.int64)
            tf = np.fromiter(counts.values(), dtype=np.float64)
            idf = np.log(1 + (len(docs) - len(rows) + 0.5) / (len(rows) + 0.5))
            norm = tf + 0.9 * (1 - 0.4 + 0.4 * lengths[rows] / avg)
            self.index[term] = (rows, idf * tf * 1.9 / norm)
        self.size = len(docs)
        self.seconds = 0.0  # time spent inside retriever calls, subtracted from step time

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        start = _clock()
        scores = np.zeros(self.size)
        for term in analyze(query):
            if term in self.index:
                rows, weights = self.index[term]
                scores[rows] += weights
        order = np.argsort(-scores)[: k + len(exclude) + 1]
        hits: list[SearchHit] = []
        for i in order:
            if scores[i] <= 0 or len(hits) == k:
                break
            if self.ids[i] not in exclude:
                hits.append(SearchHit(self.ids[i], float(scores[i]), len(hits) + 1))
        self.seconds += _clock() - start
        return hits

    def document(self, doc_id: str) -> Document:
        start = _clock()
        doc = self.docs[doc_id]
        self.seconds += _clock() - start
        return doc

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.docs

    def __len__(self) -> int:
        return self.size

    def iter_documents(self) -> Iterator[Document]:
        return iter(self.docs.values())


class TimedIndex:
    """BM25Index with the time spent in search and document lookups kept apart.

    `document_analysis` is passed through untimed: reading the stored analysis is part
    of the harness's work, so it stays in the step figure.
    """

    def __init__(self, index: BM25Index) -> None:
        self.index = index
        self.seconds = 0.0

    def search(
        self, query: str, k: int = 10, exclude: Collection[str] = frozenset()
    ) -> list[SearchHit]:
        start = _clock()
        hits = self.index.search(query, k, exclude)
        self.seconds += _clock() - start
        return hits

    def document(self, doc_id: str) -> Document:
        start = _clock()
        doc = self.index.document(doc_id)
        self.seconds += _clock() - start
        return doc

    def document_analysis(self, doc: Document) -> Any:
        return self.index.document_analysis(doc)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.index

    def __len__(self) -> int:
        return len(self.index)

    def iter_documents(self) -> Iterator[Document]:
        return self.index.iter_documents()


Retriever = NumpyBM25 | TimedIndex


def load(path: Path) -> tuple[list[Document], list[QuerySpec]]:
    with (path / "corpus.jsonl").open() as fh:
        docs = [Document(r["_id"], r["title"], r["text"]) for r in map(json.loads, fh)]
    with (path / "queries.jsonl").open() as fh:
        queries = [
            QuerySpec(r["_id"], r["text"], str(r.get("metadata", {}).get("answer", "")))
            for r in map(json.loads, fh)
        ]
    return docs, queries


class RandomPolicy:
    """A seeded stand-in for a model: plausible tool calls with realistic arguments."""

    def __init__(self, rng: random.Random, question: str) -> None:
        self.rng = rng
        self.words = [w for w in re.findall(r"[A-Za-z0-9']+", question) if len(w) > 3]

    def query(self, env: SearchHarness) -> str:
        words = self.rng.sample(self.words, min(len(self.words), self.rng.randint(2, 5)))
        titles = [e.title for e in env.state.pool.values()]
        if titles and self.rng.random() < 0.4:
            words.append(self.rng.choice(titles))
        return " ".join(words) or "film"

    def ids(self, env: SearchHarness, n: int) -> list[str]:
        pool = list(env.state.memory)
        return self.rng.sample(pool, min(n, len(pool)))

    def calls(self, env: SearchHarness) -> list[ToolCall]:
        if env.state.turn == 0:
            return [ToolCall("search_corpus", {"query": " ".join(self.words)})]
        n_calls = self.rng.choice([1, 1, 1, 2, 2, 3])
        return [self.one_call(env) for _ in range(n_calls)]

    def one_call(self, env: SearchHarness) -> ToolCall:
        roll = self.rng.random()
        if roll < 0.25:
            return ToolCall("search_corpus", {"query": self.query(env)})
        if roll < 0.33:
            queries = [self.query(env) for _ in range(self.rng.randint(2, 4))]
            return ToolCall("fan_out_search", {"queries": queries})
        if roll < 0.43:
            return ToolCall("read_document", {"doc_id": (self.ids(env, 1) or ["x"])[0]})
        if roll < 0.52:
            return ToolCall("review_docs", {"doc_ids": self.ids(env, 3) or ["x"]})
        if roll < 0.77:
            ids = self.ids(env, self.rng.randint(1, 4))
            tags = {d: self.rng.choice(TAGS) for d in ids}
            remove = self.ids(env, 1) if self.rng.random() < 0.2 else []
            remove = [d for d in remove if d not in ids]
            return ToolCall("curate", {"add_ids": ids, "remove_ids": remove, "importance": tags})
        if roll < 0.90:
            claim = " ".join(self.rng.sample(self.words, min(4, len(self.words))))
            return ToolCall("verify", {"claim": claim or "x", "doc_ids": self.ids(env, 2) or ["x"]})
        if roll < 0.94:
            titles = [e.title for e in env.state.pool.values()] or ["Film"]
            return ToolCall("grep_corpus", {"pattern": re.escape(self.rng.choice(titles))})
        return ToolCall(self.rng.choice(["curate", "searh", "verify"]), "{'bad': json")  # malformed


WORKER_GC = False  # --gc worker: collect and freeze between episodes, as a worker does


class GCPauses:
    """Collections that ran inside a timed step: (generation, seconds) each."""

    def __init__(self) -> None:
        self.in_step = False
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if not self.in_step:
            return
        if phase == "start":
            self._started = _clock()
        else:
            self.pauses.append((info["generation"], _clock() - self._started))

    def take(self) -> list[tuple[int, float]]:
        pauses, self.pauses = self.pauses, []
        return pauses


GC_PAUSES = GCPauses()


def run_episodes(
    retriever: Retriever, queries: list[QuerySpec], episodes: int, seed: int, cold: bool
) -> dict[str, list[float]]:
    rng = random.Random(seed)
    timings: dict[str, list[float]] = defaultdict(list)
    for query in rng.sample(queries, min(episodes, len(queries))):
        if WORKER_GC:  # an episode is one task in a worker (one at a time: prefork)
            gc_policy.gc_between_tasks()
            gc_policy.gc_task_started()
        if cold:
            clear_caches(retriever)
        env = SearchHarness(retriever, config=HarnessConfig())
        env.reset(query)
        policy = RandomPolicy(rng, query.text)
        while not env.state.done:
            calls = policy.calls(env)
            before = retriever.seconds
            GC_PAUSES.in_step = True
            start = _clock()
            env.step(calls)
            elapsed = _clock() - start - (retriever.seconds - before)
            GC_PAUSES.in_step = False
            kind = "grep" if any(c.name == "grep_corpus" for c in calls) else "other"
            timings[kind].append(elapsed * 1e6)
            if len(calls) == 1:  # per-tool figures come from single-call steps only
                timings[f"tool:{calls[0].name}"].append(elapsed * 1e6)
    return timings


def clear_caches(retriever: Retriever | None = None) -> None:
    if isinstance(retriever, TimedIndex):
        retriever.index.forget_decoded_analyses()
    for cached in (
        compress._sentences,
        compress.sentence_view,
        compress.sentence_weights,
        compress.compress,
        dedup.fingerprint,
        graph.extract_entities,
        working_memory.doc_label,
        working_memory._doc_line,
    ):
        cached.cache_clear()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def report_overhead(label: str, timings: dict[str, list[float]]) -> None:
    steps = timings["other"]
    print(f"\n[{label} caches] harness overhead per step, retrieval excluded (µs)")
    print(
        f"  steps without grep: n={len(steps)}  p50={percentile(steps, 50):.0f}  "
        f"p99={percentile(steps, 99):.0f}  mean={statistics.fmean(steps):.0f}"
    )
    grep = timings["grep"]
    if grep:
        print(
            f"  steps with grep:    n={len(grep)}  p50={percentile(grep, 50):.0f}  "
            f"p99={percentile(grep, 99):.0f}"
        )
    for key in sorted(k for k in timings if k.startswith("tool:")):
        values = timings[key]
        print(
            f"  {key[5:]:<16} n={len(values):<5} p50={percentile(values, 50):>6.0f}  "
            f"p99={percentile(values, 99):>7.0f}"
        )
    pauses = GC_PAUSES.take()
    counts = Counter(generation for generation, _ in pauses)
    longest = max((seconds for _, seconds in pauses), default=0.0)
    print(
        f"  GC inside steps: {counts[0]} young, {counts[1]} middle, {counts[2]} full "
        f"collections, {sum(s for _, s in pauses) * 1e3:.0f} ms in all, "
        f"longest {longest * 1e3:.1f} ms"
    )


def token_counter() -> Any:
    try:
        import tiktoken
    except ImportError:
        return None
    return tiktoken.get_encoding("cl100k_base")


def first_turn_with_30_curated(
    retriever: NumpyBM25, env: SearchHarness, policy: RandomPolicy, question: str
) -> list[ToolCall]:
    """Search, fan out and curate 30 docs in one turn, predicting the hits beforehand."""
    subqueries = [policy.query(env) for _ in range(5)]
    predicted: list[str] = []
    for text, k in [(question, 10)] + [(q, 5) for q in subqueries]:
        predicted += [h.doc_id for h in retriever.search(text, k, exclude=set(predicted))]
    ids = predicted[:30]
    return [
        ToolCall("search_corpus", {"query": question}),
        ToolCall("fan_out_search", {"queries": subqueries}),
        ToolCall(
            "curate", {"add_ids": ids, "importance": {d: TAGS[i % 4] for i, d in enumerate(ids)}}
        ),
    ]


def wm_sizes(retriever: NumpyBM25, queries: list[QuerySpec], seed: int, n: int) -> None:
    rng = random.Random(seed)
    encoder = token_counter()
    sizes: dict[int, list[tuple[int, int]]] = defaultdict(list)
    curated_at: dict[int, list[int]] = defaultdict(list)
    config = HarnessConfig(context_token_limit=10**9, max_turns=40)
    episodes = 0
    for query in rng.sample(queries, n * 2):
        env = SearchHarness(retriever, config=config)
        env.reset(query)
        policy = RandomPolicy(rng, query.text)
        obs = env.step(first_turn_with_30_curated(retriever, env, policy, query.text))
        if len(env.state.curated) < 30:
            continue  # a prediction missed (dedup backfill changed the hits); skip it
        episodes += 1
        while True:
            if obs.turn in (1, 10, 40):
                wm = obs.working_memory
                real = len(encoder.encode(wm)) if encoder else -1
                sizes[obs.turn].append((estimate_tokens(wm), real))
                curated_at[obs.turn].append(len(env.state.curated))
            if obs.done:
                break
            obs = env.step(policy.calls(env))
        if episodes == n:
            break
    print(f"\nWORKINGMEMORY size, {episodes} episodes with 30 docs curated in turn 1")
    if encoder is None:
        print("  (tiktoken is not installed: figures are the harness estimate, chars/4)")
    for turn in sorted(sizes):
        estimates = [e for e, _ in sizes[turn]]
        line = (
            f"  turn {turn:>2}: ~{statistics.fmean(estimates):.0f} tokens "
            f"(max {max(estimates)}), curated {statistics.fmean(curated_at[turn]):.1f}"
        )
        if encoder is not None:
            line += f", cl100k {statistics.fmean(r for _, r in sizes[turn]):.0f}"
        print(line)


def per_document_costs(docs: list[Document], index: BM25Index | None, n: int = 2000) -> None:
    sample = docs[:n]
    query = "who directed the film and where was it released"
    print(f"\nper-document analysis, cold cache, mean over {len(sample)} docs (µs)")
    for label, fn in (
        ("sentence split + analyze + BM25 weights", compress.sentence_weights.__wrapped__),
        ("MinHash fingerprint + LSH bands", lambda d: dedup.fingerprint.__wrapped__(d.text)),
        ("entity extraction", graph.extract_entities.__wrapped__),
    ):
        start = time.perf_counter()
        for doc in sample:
            fn(doc)
        print(f"  {label:<40} {(time.perf_counter() - start) / len(sample) * 1e6:.0f}")
    if index is not None:
        stored = [index.document(d.doc_id) for d in sample]
        start = time.perf_counter()
        for doc in stored:
            analysis = index.document_analysis(doc)
            assert analysis is not None
            analysis.fingerprint()
            analysis.entities()
            analysis.compressed(query, 4, 300)
        per = (time.perf_counter() - start) / len(sample) * 1e6
        print(f"  read from the index: fingerprint + entities + compressed view {per:.0f}")
    index_ = dedup.DedupIndex()
    for doc in sample[:500]:
        index_.add(doc.doc_id, doc.text)
    for doc in sample[500:]:
        dedup.fingerprint(doc.text)  # warm, so the figure is the lookup alone
    start = time.perf_counter()
    for doc in sample[500:]:
        index_.near_duplicate_of(doc.text)
    per = (time.perf_counter() - start) / max(len(sample) - 500, 1) * 1e6
    print(f"  near-duplicate lookup vs 500 shown docs (warm) {per:.0f}")


def build_index(docs: list[Document], directory: Path) -> BM25Index:
    started = time.perf_counter()
    index = BM25Index.build(docs, directory / "index")
    seconds = time.perf_counter() - started
    files = list(index.directory.iterdir())
    total = sum(f.stat().st_size for f in files)
    analysis = sum(f.stat().st_size for f in files if f.name.startswith("analysis."))
    print(
        f"BM25Index with stored analysis: built in {seconds:.1f}s "
        f"(analysis {index.manifest['analysis_seconds']:.1f}s of it), "
        f"{total / 2**20:.1f} MiB on disk (analysis {analysis / 2**20:.1f} MiB), "
        f"{index.manifest['analysis_skipped']} docs without a stored analysis"
    )
    return index


def run_modes(label: str, retriever: Retriever, queries: list[QuerySpec], args: Any) -> None:
    n = args.episodes
    clear_caches(retriever)
    cold = run_episodes(retriever, queries, n // 4, args.seed, cold=True)
    report_overhead(f"{label}, cold", cold)
    clear_caches(retriever)
    steady = run_episodes(retriever, queries, n, args.seed + 1, cold=False)
    report_overhead(f"{label}, steady", steady)
    run_episodes(retriever, queries, n // 2, args.seed + 2, cold=False)  # fill, then replay
    GC_PAUSES.take()  # the fill's collections are not the replay's
    hot = run_episodes(retriever, queries, n // 2, args.seed + 2, cold=False)
    report_overhead(f"{label}, hot", hot)


# What a step's time is read on: the wall clock, or the thread's own CPU time, which leaves
# out the time the step waited for a core (on a shared machine most of a wall-clock p99).
_CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock = _CLOCKS["wall"]


def main() -> None:
    global _clock
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-freeze", action="store_true", help="skip gc.freeze()")
    parser.add_argument(
        "--gc",
        choices=["worker", "freeze"],
        default="worker",
        help="worker: a rollout worker's GC settings (harness_app/harness/gc_policy.py); "
        "freeze: only gc.freeze() after loading, default thresholds (before issue 21.12)",
    )
    parser.add_argument(
        "--analysis",
        choices=["both", "computed", "stored"],
        default="both",
        help="where the per-document analysis comes from (see the module docstring)",
    )
    parser.add_argument(
        "--clock",
        choices=sorted(_CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: the thread's CPU time (leaves out waiting for a core)",
    )
    args = parser.parse_args()
    _clock = _CLOCKS[args.clock]
    path = data_dir()
    if not (path / "corpus.jsonl").is_file():
        print(f"skipped: {path}/corpus.jsonl not found (set HARNESS_SHARED_DATA)")
        return
    docs, queries = load(path)
    started = time.perf_counter()
    retriever = NumpyBM25(docs)
    print(
        f"hotpotqa-dev500: {len(docs)} docs, {len(queries)} queries; "
        f"numpy index built in {time.perf_counter() - started:.1f}s; "
        f"python {sys.version.split()[0]}"
    )
    work = Path(tempfile.mkdtemp(prefix="bench-harness-"))
    try:
        index = build_index(docs, work) if args.analysis != "computed" else None
        global WORKER_GC
        if args.gc == "worker" and not args.no_freeze:
            WORKER_GC = True
            gc_policy.gc_setup()
        elif not args.no_freeze:
            gc.freeze()
        per_document_costs(docs, index)
        if args.analysis != "stored":
            run_modes("computed", retriever, queries, args)
        if index is not None:
            run_modes("stored", TimedIndex(index), queries, args)
        wm_sizes(retriever, queries, args.seed, n=20)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
