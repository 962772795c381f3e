"""Retrieval benchmark: our memory-mapped BM25Index against tantivy, bm25s and rank-bm25.

    .venv/bin/python -m bench.bench_retrieval                      # 10k, 100k and 1M documents
    .venv/bin/python -m bench.bench_retrieval --sizes 10000,100000
    .venv/bin/python -m bench.bench_retrieval --quick              # 10k, 200 queries, a minute

Corpora are synthetic but realistic: each document takes a real title and two to six real
sentences drawn from the HotpotQA and SciFact corpora in ../shared/data, so term
frequencies and document lengths follow real text. Queries are the real HotpotQA and
SciFact questions.

Every engine sees the same terms (our Lucene-style analyzer; tantivy gets them joined by
spaces, behind a whitespace tokenizer), so they differ only in how they index and score.
All engines use k1=1.2 and b=0.75 by default, the values tantivy fixes (--k1/--b change
them for the others). "CPU q/s" counts queries per second of the serving thread's CPU
time, the figure to compare on a machine shared with other work. Each engine runs in
fresh subprocesses, one to build and one to serve, so resident memory and load time are
measured in a process that did nothing else. Our build time includes analysing the text;
for the others the shared analysis time is added to their indexing time. Latency is per
query at k=10, query analysis included.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness_app.harness.beir import iter_corpus, iter_queries
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.retrieval.builder import indexed_text
from harness_app.harness.text import analyze, split_sentences

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data"
SOURCES = ("hotpotqa-dev500", "scifact")
ENGINES = ("ours", "tantivy", "bm25s", "rank-bm25")
K = 10
SEED = 20240601
WARMUP = 10


# --- measurement helpers ----------------------------------------------------------------


def memory_mb() -> dict[str, float]:
    """Resident memory of this process from /proc (Linux): total, anonymous, file-backed, peak."""
    fields = {"VmRSS": "rss_mb", "RssAnon": "anon_mb", "RssFile": "file_mb", "VmHWM": "peak_mb"}
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in fields:
                out[fields[name]] = round(int(value.split()[0]) / 1024, 1)
    return out


def latency_stats(latencies: list[tuple[float, float]]) -> dict[str, float]:
    """p50/p99 of wall-clock and of CPU time per query, and throughput, after a warm-up.

    CPU time is reported too because on a shared machine the wall-clock tail is mostly
    the scheduler handing the core to another process.
    """
    timed = np.array(latencies[WARMUP:] if len(latencies) > 2 * WARMUP else latencies)
    first = latencies[0][0] if latencies else 0.0
    wall, cpu = timed[:, 0], timed[:, 1]
    return {
        "queries": len(timed),
        # the first query of the process: ours loads its compiled scorer then (kernel.py)
        "first_ms": round(first * 1000, 1),
        "p50_ms": round(float(np.percentile(wall, 50)) * 1000, 3),
        "p99_ms": round(float(np.percentile(wall, 99)) * 1000, 3),
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)) * 1000, 3),
        "cpu_p99_ms": round(float(np.percentile(cpu, 99)) * 1000, 3),
        "qps": round(len(timed) / float(wall.sum()), 1),
        "cpu_qps": round(len(timed) / float(cpu.sum()), 1),
    }


def time_queries(search: Any, queries: list[str]) -> tuple[list[tuple[float, float]], list[Any]]:
    latencies, top_ids = [], []
    for query in queries:
        wall, cpu = time.perf_counter(), time.thread_time()
        ids = search(query)
        latencies.append((time.perf_counter() - wall, time.thread_time() - cpu))
        top_ids.append(ids)
    return latencies, top_ids


# --- synthetic corpora -------------------------------------------------------------------


def load_material(data: Path) -> tuple[list[str], list[str], list[str]]:
    """(titles, sentences, queries) from the real corpora."""
    titles: list[str] = []
    sentences: list[str] = []
    queries: list[str] = []
    for name in SOURCES:
        for doc in iter_corpus(data / name / "corpus.jsonl"):
            titles.append(doc.title)
            sentences.extend(s for s in split_sentences(doc.text) if len(s) > 20)
        queries.extend(text for _, text, _ in iter_queries(data / name / "queries.jsonl"))
    random.Random(SEED).shuffle(queries)
    return titles, sentences, queries


def write_corpus(path: Path, size: int, titles: list[str], sentences: list[str]) -> None:
    rng = random.Random(SEED + size)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as out:
        for i in range(size):
            text = " ".join(rng.choices(sentences, k=rng.randint(2, 6)))
            row = {"_id": f"s{i}", "title": rng.choice(titles), "text": text}
            out.write(json.dumps(row) + "\n")
    tmp.rename(path)


# --- workers (each runs in its own subprocess) ---------------------------------------------


def worker_tokenize(corpus: Path, work: Path) -> dict[str, Any]:
    """Analyse the corpus once for the engines that take pre-tokenised input."""
    started = time.perf_counter()
    vocab: dict[str, int] = {}
    flat, offsets = array("i"), array("q", [0])
    for doc in iter_corpus(corpus):
        flat.extend([vocab.setdefault(t, len(vocab)) for t in analyze(indexed_text(doc))])
        offsets.append(len(flat))
    np.save(work / "tokens.npy", np.frombuffer(flat, np.int32))
    np.save(work / "offsets.npy", np.frombuffer(offsets, np.int64))
    (work / "vocab.json").write_text(json.dumps(list(vocab)))
    return {"analysis_s": round(time.perf_counter() - started, 2)}


def load_token_ids(work: Path) -> tuple[list[list[int]], list[str]]:
    flat, offsets = np.load(work / "tokens.npy"), np.load(work / "offsets.npy").tolist()
    docs = [flat[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    return docs, json.loads((work / "vocab.json").read_text())


def worker_ours_build(corpus: Path, work: Path, k1: float, b: float) -> dict[str, Any]:
    started = time.perf_counter()
    # Retrieval only, as the systems it is compared with (no stored harness analysis).
    index = BM25Index.build(iter_corpus(corpus), work / "ours", k1=k1, b=b, analysis=False)
    build_s = time.perf_counter() - started
    return {
        "build_s": round(build_s, 2),
        "build_peak_mb": memory_mb()["peak_mb"],
        "docs": len(index),
    }


def worker_ours_serve(work: Path, queries: list[str]) -> dict[str, Any]:
    started = time.perf_counter()
    index = BM25Index.load(work / "ours")
    load_s = time.perf_counter() - started
    latencies, found = time_queries(lambda q: index.search(q, K), queries)
    return {
        "kernel": "numba" if index.kernel is not None else "numpy",
        "load_s": round(load_s, 4),
        **latency_stats(latencies),
        **memory_mb(),
        "top": [[h.doc_id for h in hits] for hits in found[:200]],
        "top_scores": [[round(h.score, 4) for h in hits] for hits in found[:200]],
    }


def worker_bm25s_build(work: Path, k1: float, b: float) -> dict[str, Any]:
    import bm25s
    from bm25s.tokenization import Tokenized

    docs, vocab = load_token_ids(work)
    started = time.perf_counter()
    retriever = bm25s.BM25(method="lucene", k1=k1, b=b)
    retriever.index(
        Tokenized(ids=docs, vocab={t: i for i, t in enumerate(vocab)}), show_progress=False
    )
    retriever.save(str(work / "bm25s"))
    return {
        "index_s": round(time.perf_counter() - started, 2),
        "build_peak_mb": memory_mb()["peak_mb"],
    }


def worker_bm25s_serve(work: Path, queries: list[str]) -> dict[str, Any]:
    import bm25s

    started = time.perf_counter()
    retriever = bm25s.BM25.load(str(work / "bm25s"), mmap=True)
    load_s = time.perf_counter() - started
    vocab = retriever.vocab_dict
    doc_ids = np.array([f"s{i}" for i in range(retriever.scores["num_docs"])])

    def search(query: str) -> list[str]:
        ids = [vocab[t] for t in analyze(query) if t in vocab]
        if not ids:
            return []
        found, _ = retriever.retrieve([ids], k=K, show_progress=False, n_threads=0)
        return doc_ids[found[0]].tolist()

    latencies, top = time_queries(search, queries)
    # bm25s's best case: the whole batch in one call (the harness issues single queries)
    batch = [[vocab[t] for t in analyze(q) if t in vocab] or [vocab[""]] for q in queries]
    started = time.perf_counter()
    retriever.retrieve(batch, k=K, show_progress=False, n_threads=0)
    batch_qps = len(batch) / (time.perf_counter() - started)
    return {
        "load_s": round(load_s, 4),
        **latency_stats(latencies),
        **memory_mb(),
        "batch_qps": round(batch_qps, 1),
        "top": top[:200],
    }


def worker_rank_bm25(work: Path, queries: list[str], k1: float, b: float) -> dict[str, Any]:
    from rank_bm25 import BM25Okapi

    docs, vocab = load_token_ids(work)
    words = np.array(vocab, dtype=object)
    token_docs = [words[d].tolist() for d in docs]
    del docs
    started = time.perf_counter()
    engine = BM25Okapi(token_docs, k1=k1, b=b)
    index_s = time.perf_counter() - started
    del token_docs

    def search(query: str) -> list[str]:
        scores = engine.get_scores(analyze(query))
        top = np.argpartition(-scores, K)[:K]
        return [f"s{i}" for i in top[np.argsort(-scores[top])]]

    latencies, _ = time_queries(search, queries)
    memory = memory_mb()
    return {
        "index_s": round(index_s, 2),
        "load_s": None,
        "build_peak_mb": memory["peak_mb"],  # one process builds and serves
        **latency_stats(latencies),
        **memory,
    }


TANTIVY_FIELD = "body"
TANTIVY_K1, TANTIVY_B = 1.2, 0.75  # fixed in tantivy
TANTIVY_SCALE = TANTIVY_K1 + 1


def tantivy_schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("position", stored=True)
    # Frequencies, no positions: all BM25 needs, as our index stores.
    builder.add_text_field(TANTIVY_FIELD, tokenizer_name="terms", index_option="freq")
    return builder.build()


def tantivy_open(path: Path) -> Any:
    """The index with a whitespace tokenizer: it indexes our analysed terms unchanged."""
    import tantivy

    index = tantivy.Index(tantivy_schema(), path=str(path))
    analyzer = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
    index.register_tokenizer("terms", analyzer)
    return index


def worker_tantivy_build(work: Path) -> dict[str, Any]:
    """Index the shared analysis (terms joined by spaces) with one writer thread."""
    import tantivy

    docs, vocab = load_token_ids(work)
    words = np.array(vocab, dtype=object)
    (work / "tantivy").mkdir()
    started = time.perf_counter()
    index = tantivy_open(work / "tantivy")
    writer = index.writer(heap_size=1 << 30, num_threads=1)
    for position, doc in enumerate(docs):
        terms = " ".join(words[doc].tolist())
        writer.add_document(tantivy.Document(position=position, **{TANTIVY_FIELD: terms}))
    writer.commit()
    writer.wait_merging_threads()
    return {
        "index_s": round(time.perf_counter() - started, 2),
        "build_peak_mb": memory_mb()["peak_mb"],
    }


def tantivy_searcher(work: Path) -> tuple[Any, Callable[[str], list[tuple[float, Any]]]]:
    """The opened tantivy searcher and a search: our analysed terms OR-ed, top K as
    (score, document address), no hit count (counting would switch off its pruning)."""
    import tantivy

    index = tantivy_open(work / "tantivy")
    index.reload()
    searcher = index.searcher()
    schema = index.schema
    should = tantivy.Occur.Should

    def search(query: str) -> list[tuple[float, Any]]:
        terms = analyze(query)
        if not terms:
            return []
        clauses = [(should, tantivy.Query.term_query(schema, TANTIVY_FIELD, t)) for t in terms]
        hits: list[tuple[float, Any]] = searcher.search(
            tantivy.Query.boolean_query(clauses), K, count=False
        ).hits
        return hits

    return searcher, search


def worker_tantivy_serve(work: Path, queries: list[str]) -> dict[str, Any]:
    """Single queries, top 10, no hit count (counting would switch off tantivy's pruning).

    tantivy fixes k1=1.2 and b=0.75 and keeps BM25's (k1 + 1) factor, which Lucene 8+
    (and our index) drop: its scores are ours times 2.2 when ours uses the same k1 and b.
    """
    import tantivy  # noqa: F401  (the module's import is not part of the load time)

    started = time.perf_counter()
    searcher, search = tantivy_searcher(work)
    load_s = time.perf_counter() - started
    latencies, found = time_queries(search, queries)
    # Document ids are read back afterwards, outside the timed part, for the overlap check.
    top = [[f"s{searcher.doc(a)['position'][0]}" for _, a in hits] for hits in found[:200]]
    scores = [[round(s / TANTIVY_SCALE, 4) for s, _ in hits] for hits in found[:200]]
    return {
        "load_s": round(load_s, 4),
        **latency_stats(latencies),
        **memory_mb(),
        "segments": searcher.num_segments,
        "top": top,
        "top_scores": scores,
    }


def worker_interleaved(work: Path, queries: list[str], rounds: int = 3) -> dict[str, Any]:
    """Ours and tantivy in one process, query by query in turn (in a random order each
    query), so that a change of load falls on both alike; the best of `rounds`
    rounds of CPU q/s for each.

    Ours returns the top k's document ids (what the harness needs); it is timed with the
    scorer BM25_KERNEL chooses (`ours`, compiled when Numba is installed) and with NumPy
    only (`ours_numpy`). tantivy is timed twice:
    to its document addresses alone, as in its serve worker, and to the same ids, read
    from its stored `position` field, so that both return the same thing.
    """
    ours = BM25Index.load(work / "ours")
    ours_numpy = BM25Index.load(work / "ours", kernel="numpy")
    searcher, addresses = tantivy_searcher(work)

    def ids(query: str) -> list[str]:
        return [f"s{searcher.doc(a)['position'][0]}" for _, a in addresses(query)]

    engines = {
        "ours": lambda q: ours.search(q, K),
        "ours_numpy": lambda q: ours_numpy.search(q, K),
        "tantivy": addresses,
        "tantivy_ids": ids,
    }
    for query in queries[:WARMUP]:
        for search in engines.values():
            search(query)
    best = dict.fromkeys(engines, 0.0)
    names, shuffle = list(engines), random.Random(SEED).shuffle
    for _ in range(rounds):
        spent = dict.fromkeys(engines, 0.0)
        for query in queries:
            # Each query's engines in a new random order: those after the first may find
            # what the query reads already in the CPU's caches.
            shuffle(names)
            for name in names:
                started = time.thread_time()
                engines[name](query)
                spent[name] += time.thread_time() - started
        for name, seconds in spent.items():
            best[name] = max(best[name], len(queries) / max(seconds, 1e-9))
    return {
        "queries": len(queries),
        "rounds": rounds,
        **{f"{name}_cpu_qps": round(value, 1) for name, value in best.items()},
        "kernel": "numba" if ours.kernel is not None else "numpy",
        "ours_over_tantivy": round(best["ours"] / best["tantivy"], 3),
        "ours_numpy_over_tantivy": round(best["ours_numpy"] / best["tantivy"], 3),
        "ours_over_tantivy_ids": round(best["ours"] / best["tantivy_ids"], 3),
    }


def run_worker(args: argparse.Namespace) -> None:
    work = Path(args.work)
    queries = json.loads(Path(args.queries_file).read_text()) if args.queries_file else []
    corpus = Path(args.corpus) if args.corpus else Path()
    workers = {
        "tokenize": lambda: worker_tokenize(corpus, work),
        "ours-build": lambda: worker_ours_build(corpus, work, args.k1, args.b),
        "ours-serve": lambda: worker_ours_serve(work, queries),
        "tantivy-build": lambda: worker_tantivy_build(work),
        "tantivy-serve": lambda: worker_tantivy_serve(work, queries),
        "bm25s-build": lambda: worker_bm25s_build(work, args.k1, args.b),
        "bm25s-serve": lambda: worker_bm25s_serve(work, queries),
        "rank-bm25": lambda: worker_rank_bm25(work, queries, args.k1, args.b),
        "interleaved": lambda: worker_interleaved(work, queries),
    }
    print(json.dumps(workers[args.worker]()))


def spawn(
    worker: str,
    work: Path,
    params: tuple[float, float],
    corpus: Path | None = None,
    queries: list[str] | None = None,
) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "bench.bench_retrieval",
        "--worker",
        worker,
        "--work",
        str(work),
        f"--k1={params[0]!r}",
        f"--b={params[1]!r}",
    ]
    if corpus is not None:
        command += ["--corpus", str(corpus)]
    if queries is not None:
        path = work / f"queries-{worker}.json"
        path.write_text(json.dumps(queries))
        command += ["--queries-file", str(path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{worker} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- the run ----------------------------------------------------------------------------


def rank_bm25_queries(size: int, budget: int) -> int:
    """rank-bm25 scores every document in Python for every query term: keep its runs short."""
    return max(10, min(budget, 2_000_000 // size))


def bench_size(
    size: int, args: argparse.Namespace, material: tuple[list[str], list[str], list[str]]
) -> list[dict[str, Any]]:
    titles, sentences, queries = material
    params = (args.k1, args.b)
    workdir = Path(args.workdir)
    corpus = workdir / f"corpus-{size}-{SEED}.jsonl"
    if not corpus.exists():
        log(f"[{size}] writing synthetic corpus")
        write_corpus(corpus, size, titles, sentences)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=workdir, prefix=f"run-{size}-") as scratch:
        work = Path(scratch)
        engines = args.engines
        if {"tantivy", "bm25s", "rank-bm25"} & set(engines):
            log(f"[{size}] analysing the corpus once for tantivy / bm25s / rank-bm25")
            analysis_s = spawn("tokenize", work, params, corpus=corpus)["analysis_s"]
        if "ours" in engines:
            log(f"[{size}] ours: build, then serve {args.queries} queries")
            built = spawn("ours-build", work, params, corpus=corpus)
            served = spawn("ours-serve", work, params, queries=queries[: args.queries])
            rows.append({"size": size, "engine": "ours", **built, **served})
        if "tantivy" in engines:
            log(f"[{size}] tantivy: index, then serve")
            built = spawn("tantivy-build", work, params)
            served = spawn("tantivy-serve", work, params, queries=queries[: args.queries])
            build_s = round(analysis_s + built["index_s"], 2)
            rows.append({"size": size, "engine": "tantivy", "build_s": build_s, **built, **served})
        if args.interleaved and {"ours", "tantivy"} <= set(engines):
            log(f"[{size}] ours and tantivy interleaved in one process")
            both = spawn("interleaved", work, params, queries=queries[: args.queries])
            rows.append({"size": size, "engine": "interleaved", **both})
        if "bm25s" in engines:
            log(f"[{size}] bm25s: index, then serve")
            built = spawn("bm25s-build", work, params)
            served = spawn("bm25s-serve", work, params, queries=queries[: args.queries])
            build_s = round(analysis_s + built["index_s"], 2)
            rows.append({"size": size, "engine": "bm25s", "build_s": build_s, **built, **served})
        if "rank-bm25" in engines and (size <= args.rank_bm25_max_size):
            n = rank_bm25_queries(size, args.queries)
            log(f"[{size}] rank-bm25: index and {n} queries")
            served = spawn("rank-bm25", work, params, queries=queries[:n])
            build_s = round(analysis_s + served["index_s"], 2)
            rows.append({"size": size, "engine": "rank-bm25", "build_s": build_s, **served})
    return rows


def overlap_at_k(a: list[list[str]], b: list[list[str]]) -> float:
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x or y]
    return sum(len(set(x) & set(y)) / max(len(x), len(y)) for x, y in pairs) / max(len(pairs), 1)


def score_gap(ours: dict[str, Any], other: dict[str, Any]) -> float:
    """Largest |our score - theirs| over the documents both put in a query's top k."""
    gap = 0.0
    for ids, scores, their_ids, theirs in zip(
        ours["top"], ours["top_scores"], other["top"], other["top_scores"], strict=False
    ):
        mine = dict(zip(ids, scores, strict=True))
        for doc_id, score in zip(their_ids, theirs, strict=True):
            if doc_id in mine:
                gap = max(gap, abs(mine[doc_id] - score))
    return gap


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "| docs | engine | build s | load s | first query ms | p50 ms | p99 ms | p99 CPU ms "
        "| queries/s "
        "| CPU q/s | RSS MB (anon) | build peak MB | queries |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["engine"] == "interleaved":
            continue
        load = "—" if r.get("load_s") is None else f"{r['load_s']:.3f}"
        print(
            f"| {r['size']:,} | {r['engine']} | {r['build_s']:.1f} | {load} "
            f"| {r['first_ms']:,.1f} | {r['p50_ms']:.2f} "
            f"| {r['p99_ms']:.2f} | {r['cpu_p99_ms']:.2f} | {qps(r['qps'])} | {qps(r['cpu_qps'])} "
            f"| {r['rss_mb']:,.0f} ({r['anon_mb']:,.0f}) "
            f"| {r.get('build_peak_mb', 0):,.0f} | {r['queries']} |"
        )


def qps(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def print_summary(rows: list[dict[str, Any]]) -> None:
    for size in sorted({r["size"] for r in rows}):
        by = {r["engine"]: r for r in rows if r["size"] == size}
        both = by.pop("interleaved", None)
        if both:
            print(
                f"{size:,} docs, interleaved CPU q/s: ours ({both['kernel']}) "
                f"{both['ours_cpu_qps']:,.0f}, ours (numpy) {both['ours_numpy_cpu_qps']:,.0f}, "
                f"tantivy {both['tantivy_cpu_qps']:,.0f} (ours / tantivy "
                f"{both['ours_over_tantivy']:.2f}, numpy {both['ours_numpy_over_tantivy']:.2f}), "
                f"tantivy to ids "
                f"{both['tantivy_ids_cpu_qps']:,.0f} "
                f"(ours / tantivy {both['ours_over_tantivy_ids']:.2f})"
            )
        ours = by.get("ours")
        if not ours:
            continue
        notes = [f"{size:,} docs:"]
        if "rank-bm25" in by:
            notes.append(f"ours/rank-bm25 throughput {ours['qps'] / by['rank-bm25']['qps']:,.0f}x;")
        fastest = max(by.values(), key=lambda r: r["qps"])
        notes.append(f"fastest per-query engine {fastest['engine']} ({fastest['qps']:,.0f} q/s);")
        if "tantivy" in by:
            t = by["tantivy"]
            notes.append(f"ours/tantivy throughput {ours['qps'] / t['qps']:.2f}x")
            notes.append(f"(per CPU second {ours['cpu_qps'] / t['cpu_qps']:.2f}x);")
            notes.append(
                f"top-{K} overlap ours vs tantivy {overlap_at_k(ours['top'], t['top']):.3f}"
            )
            notes.append(f"(score gap {score_gap(ours, t):.4f});")
        if "bm25s" in by:
            b = by["bm25s"]
            notes.append(f"bm25s batch mode {b['batch_qps']:,.0f} q/s;")
            notes.append(f"top-{K} overlap ours vs bm25s {overlap_at_k(ours['top'], b['top']):.3f}")
        print(" ".join(notes))
        if "tantivy" in by and "segments" in by["tantivy"]:
            print(f"  (tantivy index in {by['tantivy']['segments']} segment(s))")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="", help="comma-separated corpus sizes (default 10000,100000,1000000)"
    )
    parser.add_argument("--quick", action="store_true", help="10k documents and 200 queries")
    parser.add_argument("--queries", type=int, default=0, help="queries per engine (default 1000)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument(
        "--k1", type=float, default=TANTIVY_K1, help="BM25 k1 (default 1.2, tantivy's fixed value)"
    )
    parser.add_argument(
        "--b", type=float, default=TANTIVY_B, help="BM25 b (default 0.75, tantivy's fixed value)"
    )
    parser.add_argument("--rank-bm25-max-size", type=int, default=1_000_000)
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument(
        "--workdir", default=str(Path(tempfile.gettempdir()) / "harness-bench-retrieval")
    )
    parser.add_argument("--json", default="", help="also write the rows to this file")
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="also time ours and tantivy query by query in one process (CPU q/s)",
    )
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--work", default="", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", default="", help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sizes = [
        int(s)
        for s in (args.sizes or ("10000" if args.quick else "10000,100000,1000000")).split(",")
    ]
    args.queries = args.queries or (200 if args.quick else 1000)
    args.engines = [e for e in args.engines.split(",") if e]
    unknown = set(args.engines) - set(ENGINES)
    if unknown:
        parser.error(
            f"--engines: unknown {', '.join(sorted(unknown))} (known: {', '.join(ENGINES)})"
        )
    if (
        "tantivy" in args.engines
        and (args.k1, args.b) != (TANTIVY_K1, TANTIVY_B)
        and not args.worker
    ):
        parser.error(
            f"tantivy scores with k1={TANTIVY_K1} b={TANTIVY_B} only; drop it from --engines"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        run_worker(args)
        return 0
    data = Path(args.data)
    if not all((data / name / "corpus.jsonl").is_file() for name in SOURCES):
        log(f"benchmark data not found under {data} (need {', '.join(SOURCES)}); use --data")
        return 2
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    material = load_material(data)
    rows = []
    for size in args.sizes:
        rows.extend(bench_size(size, args, material))
    print(
        f"\nBM25 engines, k={K}, k1={args.k1} b={args.b}, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}\n"
    )
    print_table(rows)
    print()
    print_summary(rows)
    print(f"\ntotal bench time {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps([{k: v for k, v in r.items() if k != "top"} for r in rows], indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
