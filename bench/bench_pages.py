"""Server time of the researcher pages on a large database. Prints figures, asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/harness_pages_bench \\
        .venv/bin/python bench/bench_pages.py [--episodes 100000] [--runs 20] [--rebuild]

- The episode viewer for one LLM-style episode of 40 turns that ends with 30 curated and
  500 pool documents: the harness's own state records (pool, memory, curated set and its
  log, searches, verifications, an evidence graph built by the real entity extractor over
  synthetic documents), each turn's WORKINGMEMORY rendered by the harness, stored through
  `rollouts.turn_record` (snapshots every 10 turns, deltas between), plus one model call a
  turn with 150 sampled tokens and their logprobs.
- The episode list over `--episodes` episodes (20 batches × 1,000 queries × 5 samples by
  default) with spread-out metrics, unfiltered and with filters applied.

Timing is the Django test client's request in-process: URL resolving, middleware (session
and user lookups), the view, the queries and the template, i.e. server time without the
network. The data is generated once and reused; --rebuild starts over.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Production rendering: no template debug information, no query log.
os.environ.setdefault("DEBUG", "0")

BENCH_NAME = "pages-bench"
TURNS = 40
POOL = 500
CURATED = 30
GOLD = 4
WORDS = [
    "river",
    "harbour",
    "castle",
    "abbey",
    "railway",
    "bridge",
    "festival",
    "lamp",
    "foundry",
    "valley",
    "mill",
    "canal",
    "island",
    "museum",
    "chapel",
    "glassworks",
    "shipyard",
    "lighthouse",
    "market",
    "academy",
    "orchard",
    "quarry",
    "treaty",
    "charter",
    "council",
    "parish",
    "garrison",
    "ferry",
    "estate",
    "manor",
    "tower",
    "forge",
]
NAMES = [
    "Alder",
    "Brisk",
    "Calder",
    "Dunmore",
    "Elsworth",
    "Fenwick",
    "Garrow",
    "Halvard",
    "Islay",
    "Jessop",
    "Kestle",
    "Lunan",
    "Marrow",
    "Norwell",
    "Ostrel",
    "Penrose",
    "Quarrie",
    "Redmire",
    "Sorrin",
    "Tamsford",
    "Ulver",
    "Vire",
    "Wendle",
    "Yarrow",
]


def setup(rebuild: bool) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    _database_ensure()
    call_command("migrate", verbosity=0)
    if rebuild:
        _wipe()


def _database_ensure() -> None:
    """Create the bench's PostgreSQL database on first use."""
    from django.db import connection

    settings = connection.settings_dict
    if connection.vendor != "postgresql":
        return
    import psycopg

    params = {
        "host": settings["HOST"] or "127.0.0.1",
        "port": settings["PORT"] or 5432,
        "user": settings["USER"],
        "password": settings["PASSWORD"] or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [settings["NAME"]]
        ).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{settings["NAME"]}"')


def _wipe() -> None:
    from harness_app.models import Benchmark, Corpus, PolicyConfig
    from trajectories.models import RolloutBatch

    RolloutBatch.objects.filter(benchmark__name=BENCH_NAME).delete()
    Benchmark.objects.filter(name=BENCH_NAME).delete()
    Corpus.objects.filter(name=BENCH_NAME).delete()
    PolicyConfig.objects.filter(name__startswith="bench-").delete()


# --- synthetic corpus -----------------------------------------------------------------------


def _entity(rng: random.Random) -> str:
    return f"{rng.choice(NAMES)} {rng.choice(WORDS).title()}"


def _document_text(rng: random.Random, title: str) -> str:
    year = rng.randint(1600, 1990)
    sentences = [f"{title} is a {rng.choice(WORDS)} near {_entity(rng)} founded in {year}."]
    for _ in range(rng.randint(3, 6)):
        sentences.append(
            f"The {rng.choice(WORDS)} of {_entity(rng)} was linked to {_entity(rng)} "
            f"by the {rng.choice(WORDS)} of {rng.randint(1600, 1990)}, with "
            f"{rng.randint(1, 90)},{rng.randint(100, 999)} visitors a year."
        )
    return " ".join(sentences)


def corpus_create(rng: random.Random, size: int = 3000) -> Any:
    from harness_app.models import Benchmark, Corpus, Document

    corpus = Corpus.objects.create(name=BENCH_NAME, content_hash="b" * 64, doc_count=size)
    titles = [f"{_entity(rng)} {i}" for i in range(size)]
    Document.objects.bulk_create(
        (
            Document(
                corpus=corpus,
                external_id=t.replace(" ", "_"),
                title=t,
                text=_document_text(rng, t),
            )
            for t in titles
        ),
        batch_size=2000,
    )
    return Benchmark.objects.create(
        name=BENCH_NAME, corpus=corpus, source="beir", content_hash="b" * 64
    )


def queries_create(rng: random.Random, benchmark: Any, count: int) -> list[int]:
    from harness_app.models import Query

    Query.objects.bulk_create(
        (
            Query(
                benchmark=benchmark,
                external_id=f"q{i}",
                text=f"Which {rng.choice(WORDS)} near {_entity(rng)} was founded by the "
                f"{rng.choice(WORDS)} of {_entity(rng)}?",
                answer=_entity(rng),
            )
            for i in range(count)
        ),
        batch_size=2000,
    )
    return list(Query.objects.filter(benchmark=benchmark).values_list("pk", flat=True))


# --- 100,000 episodes for the list ------------------------------------------------------------


def episodes_create(rng: random.Random, benchmark: Any, total: int) -> None:
    from harness_app.models import PolicyConfig
    from trajectories.models import Episode, RolloutBatch, RolloutGroup

    samples, batches = 5, 20
    queries = queries_create(rng, benchmark, max(1, total // (samples * batches)))
    policies = [
        PolicyConfig.objects.create(name=f"bench-{name}", kind="openai", model=name)
        for name in ("qwen3-4b", "qwen3-4b-sft", "qwen3-4b-rl-step200", "qwen3-8b")
    ]
    ablations = ["full", "-evidence_graph", "-compression-dedup", "-importance_tags", "full"]
    reasons = ["end_search"] * 6 + ["max_turns", "context_budget", "format_errors"]
    for b in range(batches):
        batch = RolloutBatch.objects.create(
            benchmark=benchmark,
            policy=policies[b % len(policies)],
            ablation_label=ablations[b % len(ablations)],
            samples_per_query=samples,
            status="completed",
            episodes_total=len(queries) * samples,
            episodes_completed=len(queries) * samples,
        )
        groups = RolloutGroup.objects.bulk_create(
            (RolloutGroup(batch=batch, query_id=q) for q in queries), batch_size=2000
        )
        Episode.objects.bulk_create(
            (_episode(rng, batch, g, s, reasons) for g in groups for s in range(samples)),
            batch_size=5000,
        )
        print(f"  batch {b + 1}/{batches}: {len(groups) * samples} episodes", flush=True)


def _episode(rng: random.Random, batch: Any, group: Any, sample: int, reasons: list[str]) -> Any:
    from trajectories.models import Episode

    failed = rng.random() < 0.03
    skill = rng.betavariate(2, 2)
    recall = round(min(1.0, max(0.0, rng.gauss(skill, 0.2))), 3)
    metrics = {"curated_recall": recall, "turns": rng.randint(3, 40)}
    return Episode(
        group=group,
        batch=batch,
        query_id=group.query_id,
        sample_index=sample,
        status="failed" if failed else "completed",
        termination_reason="model_timeout" if failed else rng.choice(reasons),
        metrics=metrics,
        reward=None if failed else round(rng.gauss(skill * 3, 0.6), 3),
        curated_recall=None if failed else recall,
        final_answer_recall=None if failed else round(min(1.0, recall * rng.random() * 1.4), 3),
        trajectory_recall=None if failed else round(min(1.0, recall + rng.random() * 0.4), 3),
        tool_diversity=None if failed else rng.randint(1, 7),
        turns=metrics["turns"],
        annotation_status=rng.choice(["none"] * 8 + ["approved", "rejected"]),
    )


# --- one long episode for the viewer -----------------------------------------------------------


def long_episode_create(rng: random.Random, benchmark: Any) -> int:
    """A 40-turn episode stored exactly as the rollout worker stores one."""
    from harness_app.models import Document, PolicyConfig, Qrel, Query
    from trajectories.models import Episode, RolloutBatch, RolloutGroup
    from trajectories.services import rollouts

    policy = PolicyConfig.objects.create(name="bench-viewer", kind="openai", model="qwen3-4b")
    query = Query.objects.create(
        benchmark=benchmark, external_id="viewer-q", text="Which harbour town built the lamp?"
    )
    batch = RolloutBatch.objects.create(benchmark=benchmark, policy=policy, status="completed")
    group = RolloutGroup.objects.create(batch=batch, query=query)
    episode = Episode.objects.create(group=group, batch=batch, query=query)
    docs = list(
        Document.objects.filter(corpus=benchmark.corpus).order_by("?")[:POOL]
    )  # the pool, in the order it is found
    Qrel.objects.bulk_create(
        Qrel(query=query, document=d, grade=2 if i == 0 else 1)
        for i, d in enumerate(docs[5 : 5 + GOLD * 40 : 40])
    )
    claim = rollouts.episode_claim(episode_id=episode.pk)
    assert claim is not None
    previous = None
    for turn in _turns(rng, query.text, docs):
        rollouts.turn_record(claim=claim, turn=turn, previous_state=previous)
        previous = turn.state
    Episode.objects.filter(pk=episode.pk).update(
        status="completed",
        termination_reason="end_search",
        turns=TURNS,
        metrics={"curated_recall": 0.75, "precision": 0.1, "f_beta": 0.3, "beta": 2.0},
        reward=1.2,
        reward_components={"f_beta": 0.3, "trajectory_recall": 0.3, "total": 1.2},
    )
    return episode.pk


def _turns(rng: random.Random, question: str, docs: list[Any]) -> Any:
    """TurnRecords of a plausible 40-turn search, each with its model calls."""
    from harness_app.harness.ablation import Ablation
    from harness_app.harness.config import HarnessConfig
    from harness_app.harness.metrics import RecallSoFar
    from harness_app.harness.runner import StepCalls, TurnRecord
    from harness_app.harness.state import HarnessState
    from harness_app.harness.working_memory import render_working_memory

    config = HarnessConfig()
    state = HarnessState(query_id="viewer-q", question=question)
    per_turn = -(-POOL // (TURNS - 2))
    found = iter(docs)
    for t in range(TURNS + 1):
        state.turn = t
        calls = _turn_actions(rng, state, found, per_turn, t) if t else []
        wm = render_working_memory(state, config, Ablation())
        hits = "\n".join(
            f"- {d} ({state.pool[d].score:.1f}): {state.memory[d].snippet[:220]}"
            for d in list(state.pool)[-per_turn:]
        )
        observation = f"[search_corpus] {per_turn} results\n{hits}\n\n{wm}" if t else wm
        state.tokens_used += len(observation) // 4
        state.wm_tokens = len(wm) // 4
        record = TurnRecord(
            turn=t,
            tool_calls=calls,
            tool_results=[],
            observation_text=observation,
            working_memory=wm,
            state=state.to_json(),
            recall=RecallSoFar(
                curated=min(1.0, t / 30),
                trajectory=min(1.0, t / 20),
                final_answer=1.0 if t > 25 else 0.0,
            ),
            policy_seconds=1.5,
            env_seconds=0.002,
            terminated=False,
            truncated=False,
            termination_reason="",
            calls=StepCalls(model=[(t, _model_call(rng))] if t else []),
        )
        yield record


def _turn_actions(
    rng: random.Random, state: Any, found: Any, per_turn: int, t: int
) -> list[dict[str, Any]]:
    from harness_app.harness.state import (
        CuratedItem,
        CurationEvent,
        MemoryEntry,
        PoolEntry,
        SearchRecord,
        VerificationRecord,
    )
    from harness_app.harness.types import Document as HarnessDocument

    query = f"{rng.choice(WORDS)} {_entity(rng)}"
    new = [d for _, d in zip(range(per_turn), found, strict=False)]
    for d in new:
        state.shown[d.external_id] = t
        state.pool[d.external_id] = PoolEntry(
            d.external_id, d.title, round(rng.uniform(3, 18), 2), t, query, "search_corpus"
        )
        state.memory[d.external_id] = MemoryEntry(d.external_id, d.title, d.text[:400], t)
        state.graph.add_document(HarnessDocument(d.external_id, d.title, d.text), t)
    state.searches.append(SearchRecord(t, "search_corpus", query, [d.external_id for d in new]))
    state.tool_counts["search_corpus"] = state.tool_counts.get("search_corpus", 0) + 1
    tags = ("very_high", "high", "fair", "low")
    for d in new[:4]:
        if len(state.curated) >= 30:
            gone = min(state.curated, key=lambda k: state.curated[k].added_turn)
            del state.curated[gone]
            state.curation_log.append(CurationEvent(t, "evicted", gone, "low", d.external_id))
        tag = rng.choice(tags)
        state.curated[d.external_id] = CuratedItem(d.external_id, tag, t)
        state.curation_log.append(CurationEvent(t, "added", d.external_id, tag))
    if t % 3 == 0 and state.curated:
        doc_id = rng.choice(list(state.curated))
        state.verifications.append(
            VerificationRecord(t, f"{doc_id} mentions the harbour", doc_id, "supported", 0.8, [])
        )
    return [
        {"name": "search_corpus", "arguments": {"query": query}, "call_id": "c0"},
        {
            "name": "curate",
            "arguments": {"add_ids": [d.external_id for d in new[:4]]},
            "call_id": "c1",
        },
    ]


def _model_call(rng: random.Random) -> Any:
    from harness_app.harness.llm.client import ModelCallRecord

    completion = [rng.randrange(100, 150_000) for _ in range(150)]
    logprobs = [-abs(rng.gauss(0, 1)) for _ in completion]
    content = [
        {"token": f"tok{i}", "logprob": lp} for i, lp in zip(completion, logprobs, strict=True)
    ]
    return ModelCallRecord(
        request={"messages": []},
        response={
            "choices": [
                {
                    "message": {"role": "assistant", "content": "I will search. " * 30},
                    "logprobs": {"content": content},
                    "finish_reason": "stop",
                }
            ]
        },
        prompt_token_ids=[rng.randrange(100, 150_000) for _ in range(3000)],
        completion_token_ids=completion,
        completion_logprobs=logprobs,
        finish_reason="stop",
        latency_ms=900.0,
        policy_version="bench@qwen3-4b",
    )


# --- measuring --------------------------------------------------------------------------------


@contextmanager
def sql_timer(into: list[tuple[int, float]]) -> Any:
    """Count queries and the time spent in them during a block."""
    from django.db import connection

    spent = {"n": 0, "s": 0.0}

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent["n"] += 1
            spent["s"] += time.perf_counter() - started

    with connection.execute_wrapper(wrapper):
        yield
    into.append((spent["n"], spent["s"]))


def measure(client: Any, url: str, runs: int) -> dict[str, float]:
    for _ in range(3):  # warm caches: templates, the connection, PostgreSQL's buffers
        assert client.get(url).status_code == 200, url
    times: list[float] = []
    sql: list[tuple[int, float]] = []
    size = 0
    for _ in range(runs):
        with sql_timer(sql):
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        size = len(response.content)
    times.sort()
    return {
        "p50": statistics.median(times),
        "p95": times[min(len(times) - 1, int(0.95 * len(times)))],
        "min": times[0],
        "queries": sql[-1][0],
        "sql_ms": statistics.median(s for _, s in sql) * 1000,
        "kib": size / 1024,
    }


def report(label: str, figures: dict[str, float]) -> None:
    print(
        f"{label:<58} p50 {figures['p50']:7.1f} ms  p95 {figures['p95']:7.1f} ms  "
        f"min {figures['min']:6.1f} ms  {figures['queries']:>2.0f} queries "
        f"({figures['sql_ms']:5.1f} ms SQL)  {figures['kib']:6.0f} KiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    setup(args.rebuild)

    from django.db import connection
    from django.test import Client

    from harness_app.models import Benchmark
    from harness_app.roles import Role
    from harness_app.services.users import user_ensure
    from trajectories.models import Episode

    rng = random.Random(7)
    benchmark = Benchmark.objects.filter(name=BENCH_NAME).first()
    if benchmark is None:
        print(f"generating: a corpus, {args.episodes:,} episodes and one 40-turn episode ...")
        started = time.perf_counter()
        benchmark = corpus_create(rng)
        episodes_create(rng, benchmark, args.episodes)
        long_episode_create(rng, benchmark)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"  generated in {time.perf_counter() - started:.0f} s")
    viewer = Episode.objects.get(query__external_id="viewer-q", batch__benchmark=benchmark)
    total = Episode.objects.filter(batch__benchmark=benchmark).count()
    user, _ = user_ensure(username="bench", password="bench-pages-pw", role=Role.RESEARCHER)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)

    print(f"\n{connection.vendor}, {total:,} episodes; {args.runs} requests each after warm-up")
    print("episode viewer: 40 turns, 30 curated, 500 pool documents, 40 model calls")
    report(f"/episodes/{viewer.pk}/", measure(client, f"/episodes/{viewer.pk}/", args.runs))
    tokens = f"/episodes/{viewer.pk}/turns/20/tokens/"
    report(f"{tokens} (token strip fragment)", measure(client, tokens, args.runs))
    print("episode list:")
    batch = Episode.objects.filter(batch__benchmark=benchmark).values_list("batch_id").first()
    word = "glassworks"
    for url in (
        "/episodes/",
        "/episodes/?status=completed&curated_recall_min=0.5&sort=reward_desc",
        "/episodes/?curated_recall_min=0.4&curated_recall_max=0.6&final_answer_recall_min=0.3"
        "&turns_max=20&sort=final_answer_recall_desc",
        f"/episodes/?batch={batch[0] if batch else 1}&sort=curated_recall_asc",
        "/episodes/?termination_reason=max_turns&annotation_status=approved",
        f"/episodes/?q={word}",
        f"/episodes/?q={word}&status=completed&sort=reward_desc",
        "/episodes/?status=completed&curated_recall_min=0.5&sort=reward_desc&page=500",
    ):
        report(url, measure(client, url, args.runs))
    print("other pages:")
    report("/ (dashboard)", measure(client, "/", max(5, args.runs // 4)))


if __name__ == "__main__":
    main()
