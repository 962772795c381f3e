"""Check-pass throughput of the MuSiQue and 2WikiMultihopQA readers on synthetic files.

    .venv/bin/python bench/bench_import_formats.py [--questions 20000]

Writes a MuSiQue JSONL (20 paragraphs a question) and a 2WikiMultihopQA JSON array (10
paragraphs a question) into a temporary folder, each paragraph drawn from a pool a third the
size of all paragraphs so that many repeat across questions, as in the real files. Then it
runs the import's check pass (parse, validate, deduplicate, hash; no database) over each and
prints questions and paragraphs per second, the documents kept and the peak resident memory.
On a shared machine the absolute figures swing with its load, so each line also gives the
check pass's time as a multiple of one bare `json.loads` pass over the same file (the check
pass reads the file three times: documents, queries, judgements). The write pass is the same
for every format (bench_import.py measures it).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness_app.importers.formats import source_open  # noqa: E402
from harness_app.importers.scan import source_scan  # noqa: E402

WORDS = [
    "orchard",
    "river",
    "harbour",
    "lamp",
    "village",
    "charter",
    "steam",
    "quay",
    "salt",
    "timber",
    "mill",
    "ferry",
]


def _pool(rng: random.Random, size: int) -> list[tuple[str, list[str]]]:
    return [
        (" ".join(rng.choices(WORDS, k=2)).title() + f" {i}", [
            " ".join(rng.choices(WORDS, k=12)) + "." for _ in range(4)
        ])
        for i in range(size)
    ]  # fmt: skip


def write_musique(path: Path, questions: int, rng: random.Random) -> int:
    pool = _pool(rng, questions * 20 // 3)
    with open(path, "w", encoding="utf-8") as out:
        for q in range(questions):
            chosen = rng.sample(pool, 20)
            paragraphs = [
                {"idx": i, "title": t, "paragraph_text": " ".join(s), "is_supporting": i < 2}
                for i, (t, s) in enumerate(chosen)
            ]
            hops = [{"id": i, "question": "q", "answer": "a", "paragraph_support_idx": i}
                    for i in range(2)]  # fmt: skip
            record = {"id": f"2hop__{q}", "question": "Which river?", "answer": "river",
                      "answer_aliases": [], "answerable": True, "paragraphs": paragraphs,
                      "question_decomposition": hops}  # fmt: skip
            out.write(json.dumps(record) + "\n")
    return questions * 20


def write_twowiki(path: Path, questions: int, rng: random.Random) -> int:
    pool = _pool(rng, questions * 10 // 3)
    with open(path, "w", encoding="utf-8") as out:
        out.write("[")
        for q in range(questions):
            context = [[t, s] for t, s in rng.sample(pool, 10)]
            facts = [[context[0][0], 0], [context[1][0], 1]]
            record = {"_id": f"w{q}", "type": "compositional", "question": "Who?",
                      "context": context, "supporting_facts": facts,
                      "evidences": [["a", "b", "c"]], "answer": "river"}  # fmt: skip
            out.write(("," if q else "") + json.dumps(record))
        out.write("]")
    return questions * 10


def bare_parse_seconds(path: Path) -> float:
    started = time.monotonic()
    with open(path, encoding="utf-8") as handle:
        if path.suffix == ".json":
            json.load(handle)
        else:
            for line in handle:
                json.loads(line)
    return time.monotonic() - started


def measure(path: Path, fmt: str, questions: int, paragraphs: int) -> None:
    floor = bare_parse_seconds(path)
    started = time.monotonic()
    result = source_scan(source_open(path, fmt=fmt, split="test"), split="test")
    seconds = time.monotonic() - started
    size = path.stat().st_size / 1024**2
    print(
        f"{fmt:<16} {size:7.1f} MB  {seconds:6.2f} s  {questions / seconds:9,.0f} questions/s  "
        f"{paragraphs / seconds:9,.0f} paragraphs/s  {result.documents:,} documents  "
        f"{result.qrels:,} qrels  ({seconds / floor:.1f}x one bare JSON parse)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20_000)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        musique = Path(tmp) / "musique.jsonl"
        measure(musique, "musique", args.questions, write_musique(musique, args.questions, rng))
        twowiki = Path(tmp) / "dev.json"
        paragraphs = write_twowiki(twowiki, args.questions, rng)
        measure(twowiki, "2wikimultihopqa", args.questions, paragraphs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
