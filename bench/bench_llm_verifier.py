"""The LLM verifier against a live server (llm/verifier.py): latency and token counts per
judged (claim, document), and how the model's answers parse.

Judges each query of the demo benchmark's qrels against one of its relevant documents and
one unrelated document, with a claim built from the question and its answer, and prints
per-call latency (median, max), prompt and completion tokens, and the verdicts (how many
unclear: answers that named no verdict).

    .venv/bin/python bench/bench_llm_verifier.py [--base-url http://127.0.0.1:8011/v1] \
        [--model NAME] [--limit 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness_app.harness.llm.verifier import LLMVerifier
from harness_app.harness.types import Document

DEMO = Path(__file__).resolve().parent.parent / "harness_app" / "demo_data"


def _pairs(limit: int) -> list[tuple[str, Document]]:
    docs = {}
    for line in (DEMO / "corpus.jsonl").read_text().splitlines():
        row = json.loads(line)
        docs[row["_id"]] = Document(row["_id"], row["title"], row["text"])
    queries = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines()]
    qrels: dict[str, list[str]] = {}
    for line in (DEMO / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc_id, _ = line.split("\t")
        qrels.setdefault(qid, []).append(doc_id)
    ids = list(docs)
    pairs = []
    for query in queries[:limit]:
        relevant = qrels.get(query["_id"], [])
        if not relevant:
            continue
        claim = f"{query['text']} {query['metadata'].get('answer', '')}"
        unrelated = next(d for d in ids if d not in relevant)
        pairs += [(claim, docs[relevant[-1]]), (claim, docs[unrelated])]
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8011/v1")
    parser.add_argument("--model", default="", help="default: the server's first model")
    parser.add_argument("--limit", type=int, default=6, help="queries to judge")
    args = parser.parse_args()
    model = args.model or httpx.get(f"{args.base_url}/models", timeout=10).json()["data"][0]["id"]
    verifier = LLMVerifier(args.base_url, model, timeout_s=300.0)
    verdicts: Counter[str] = Counter()
    for claim, document in _pairs(args.limit):
        verdicts[verifier.verify(claim, document).verdict] += 1
    calls = verifier.take_calls()
    latency = [c.latency_ms for c in calls]
    print(f"server {args.base_url}, model {model}, {len(calls)} calls")
    print(f"latency ms: median {statistics.median(latency):.0f}, max {max(latency):.0f}")
    print(
        f"prompt tokens: median {statistics.median(c.prompt_tokens for c in calls):.0f}; "
        f"completion tokens: median {statistics.median(c.completion_tokens for c in calls):.0f}"
    )
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    print(f"first answer: {calls[0].completion[:200]!r}")


if __name__ == "__main__":
    main()
