"""Fixtures for the corpora and benchmarks tests: small benchmark files written per test."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from harness_app.models import (
    Benchmark,
    Corpus,
    Document,
    ImportJob,
    PolicyConfig,
    Qrel,
    Query,
)
from harness_app.services.benchmarks import benchmark_import
from tests.paths import DEMO_DIR

MODELS = (Corpus, Document, Benchmark, Query, Qrel, ImportJob, PolicyConfig)

# A small, original BEIR benchmark: an orchard almanac.
CORPUS = [
    {
        "_id": "alder",
        "title": "Alder Grange",
        "text": "Alder Grange grows pears on the east slope.",
    },
    {
        "_id": "brisk",
        "title": "Brisk Orchard",
        "text": "Brisk Orchard was planted in 1908 by Ada Fenn.",
    },
    {"_id": "fenn", "title": "Ada Fenn", "text": "Ada Fenn was a grafter born in Colby Marsh."},
    {"_id": "colby", "title": "Colby Marsh", "text": "Colby Marsh is a village on the river Teal."},
    {"_id": "teal", "title": "River Teal", "text": "The Teal is 41 km long. It floods in March."},
    {
        "_id": "quince",
        "title": "Quince Day",
        "text": "Quince Day is held in Colby Marsh — ünïcödé.",
    },
]
QUERIES = [
    {
        "_id": "q1",
        "text": "Where was the planter of Brisk Orchard born?",
        "metadata": {"answer": "Colby Marsh"},
    },
    {
        "_id": "q2",
        "text": "How long is the river by Ada Fenn's village?",
        "metadata": {"answer": "41 km"},
    },
    {
        "_id": "q3",
        "text": "What does Alder Grange grow?",
        "metadata": {"answer": ["pears", "pear"]},
    },
]
QRELS = [
    ("q1", "brisk", 1),
    ("q1", "fenn", 2),
    ("q2", "colby", 1),
    ("q2", "teal", 2),
    ("q3", "alder", 2),
]


def _jsonl(rows: Iterable[Any]) -> str:
    return "".join(
        r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) + "\n" for r in rows
    )


def write_beir(
    folder: Path,
    *,
    corpus: Iterable[Any] = CORPUS,
    queries: Iterable[Any] = QUERIES,
    qrels: Iterable[Any] = QRELS,
    split: str = "test",
) -> Path:
    """A BEIR folder; rows may be dicts (dumped as JSON) or raw strings (written as given)."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(_jsonl(corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text(_jsonl(queries), encoding="utf-8")
    lines = ["query-id\tcorpus-id\tscore\n"]
    lines += [r if isinstance(r, str) else "\t".join(map(str, r)) + "\n" for r in qrels]
    (folder / "qrels" / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    return folder


def row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in MODELS}


@pytest.fixture
def beir_folder(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "orchard")


@pytest.fixture
def data_dir(settings, tmp_path: Path) -> Path:
    """A private DATA_DIR, so indexes and uploads of one test never meet another's."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def existing(db) -> Benchmark:
    """The demo benchmark, imported so that "nothing changed" compares non-zero counts."""
    result = benchmark_import(path=DEMO_DIR, name="existing", fmt="beir")
    return Benchmark.objects.get(pk=result.benchmark_id)


# --- HotpotQA ---------------------------------------------------------------------------

# Original questions in the official HotpotQA layout (not taken from the dataset).
HOTPOT = [
    {
        "_id": "h1",
        "question": "Which river runs through the town where clockmaker Ansel Pryde was born?",
        "answer": "Lerrow River",
        "type": "bridge",
        "level": "easy",
        "supporting_facts": [["Ansel Pryde", 1], ["Kettering Vale", 1]],
        "context": [
            [
                "Ansel Pryde",
                ["Ansel Pryde (1801–1870) was a clockmaker.", " He was born in Kettering Vale."],
            ],
            [
                "Kettering Vale",
                ["Kettering Vale is a market town.", " The Lerrow River runs through it."],
            ],
            ["Pryde & Sons", ["Pryde & Sons sold clocks in Dunmere."]],
        ],
    },
    {
        "_id": "h2",
        "question": "Were Ansel Pryde and Mira Okonjo both clockmakers?",
        "answer": "yes",
        "type": "comparison",
        "level": "medium",
        "supporting_facts": [["Ansel Pryde", 0], ["Mira Okonjo", 0]],
        "context": [
            ["Mira Okonjo", ["Mira Okonjo (born 1950) is a clockmaker from Dunmere."]],
            [
                "Ansel Pryde",
                ["Ansel Pryde (1801–1870) was a clockmaker.", " He was born in Kettering Vale."],
            ],
        ],
    },
    {
        "_id": "h3",
        "question": "What moor lies north of Dunmere?",
        "answer": "Hollin Moor",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["Dunmere", 0], ["Hollin Moor", 0]],
        "context": [
            ["Dunmere", ["Dunmere is a port.", " Hollin Moor lies to its north."]],
            ["Pryde, Sons", ["A second shop with a similar name."]],
        ],
    },
]


def write_hotpot(path: Path, records: list[Any] = HOTPOT, *, indent: int | None = 1) -> Path:
    path.write_text(json.dumps(records, indent=indent, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def hotpot_file(tmp_path: Path) -> Path:
    return write_hotpot(tmp_path / "hotpot_dev_distractor.json")


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    # Logins are set up per test; the default hasher spends ~0.4 s on each on purpose.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
