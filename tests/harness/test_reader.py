"""The reader: document order, the prompt and its budget, calls to a fake and a real server,
and the eval command's answer metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_app.harness.cli import main
from harness_app.harness.reader import (
    READER_SYSTEM_PROMPT,
    Reader,
    ReaderConfig,
    answer_fields,
    clean_answer,
    context_blocks,
    curated_order,
    gold_order,
    judge_verdict,
    reader_messages,
)
from harness_app.harness.state import CuratedItem
from harness_app.harness.types import Document, QuerySpec
from tests.fakes.openai_server import FakeOpenAIServer
from tests.harness.test_cli import beir  # noqa: F401 - the fixture
from tests.vllm import VLLM_URL, base_model, needs_vllm

DOCS = [
    Document("a", "Alpha", "Alpha was born in Calder Falls in 1901."),
    Document("b", "Beta", "Beta wrote the opera Glass Harbour."),
]
QUERY = QuerySpec("q1", "Where was Alpha born?", answer="Calder Falls", qrels={"a": 2, "b": 1})


def test_curated_documents_go_by_importance_then_curation_order():
    curated = {
        "low-first": CuratedItem("low-first", "low", 1),
        "high-late": CuratedItem("high-late", "high", 5),
        "top": CuratedItem("top", "very_high", 3),
        "high-early": CuratedItem("high-early", "high", 2),
        "high-same-turn": CuratedItem("high-same-turn", "high", 2),
    }
    assert curated_order(curated) == [
        "top",
        "high-early",
        "high-same-turn",
        "high-late",
        "low-first",
    ]


def test_gold_order_puts_answer_documents_first_and_skips_grade_zero():
    assert gold_order({"e": 1, "x": 0, "ans": 2}) == ["ans", "e"]


def test_prompt_numbers_the_documents_with_titles_and_ends_with_the_question():
    blocks = context_blocks(DOCS, max_context_chars=6000, max_doc_chars=1500)
    messages = reader_messages(QUERY.text, blocks)
    assert messages[0] == {"role": "system", "content": READER_SYSTEM_PROMPT}
    user = messages[1]["content"]
    assert user.index("[1] Alpha\nAlpha was born") < user.index("[2] Beta\nBeta wrote")
    assert "Question: Where was Alpha born?\n" in user and user.endswith("\nAnswer:")
    assert user.index("[2] Beta") < user.index("Question:")


def test_clipping_cuts_long_documents_at_a_word_and_stops_at_the_budget():
    long = Document("long", "Long", " ".join(f"word{i}" for i in range(500)))
    blocks = context_blocks([long, *DOCS], max_context_chars=260, max_doc_chars=200)
    ids = [doc_id for doc_id, _ in blocks]
    first = blocks[0][1]
    assert len(first) <= 200 and first.endswith("…")
    assert not first.removesuffix("…").endswith("word")  # whole words only
    # 260 - 202 leaves room for Alpha's 48 characters but not for Beta too.
    assert ids == ["long", "a"]
    assert sum(len(b) for _, b in blocks) <= 260
    assert context_blocks([long], max_context_chars=10, max_doc_chars=10) == []


@pytest.mark.parametrize(
    ("raw", "answer"),
    [
        ("Calder Falls", "Calder Falls"),
        ("Answer: Calder Falls.\nBecause the document says so.", "Calder Falls"),
        ('\n\n"Yes"', "Yes"),
        ("The answer is 1901.", "1901"),
        ("", ""),
    ],
)
def test_clean_answer_keeps_the_first_line_without_leads_or_quotes(raw, answer):
    assert clean_answer(raw) == answer


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("correct", True), ("Incorrect.", False), ("not correct", False), ("maybe", None)],
)
def test_judge_verdict(reply, verdict):
    assert judge_verdict(reply) is verdict


def test_bad_budgets_are_refused_with_their_name():
    with pytest.raises(ValueError, match="max_context_chars"):
        ReaderConfig(base_url="http://x/v1", model="m", max_context_chars=0)


def test_reader_asks_a_hosted_server_at_temperature_zero_and_scores_the_answer():
    server = FakeOpenAIServer(hosted=True, reply=lambda n, body: "Answer: Calder Falls.")
    with server, Reader(ReaderConfig(server.base_url, "fake-model", max_tokens=16)) as reader:
        fields = answer_fields(reader, QUERY, DOCS)
    [request] = [r["body"] for r in server.requests]
    assert request["temperature"] == 0.0 and request["max_tokens"] == 16
    assert not {"return_token_ids", "logprobs", "top_logprobs"} & set(request)
    assert "Alpha was born in Calder Falls" in request["messages"][1]["content"]
    assert fields["reader_answer"] == "Calder Falls"
    assert (fields["answer_em"], fields["answer_f1"]) == (1.0, 1.0)
    call = fields["reader"]
    assert call["doc_ids"] == ["a", "b"] and call["model"] == "fake-model"
    assert (
        call["prompt_tokens"] > 0 and call["completion_tokens"] == len("Answer: Calder Falls.") + 1
    )
    assert call["latency_ms"] > 0 and call["error"] == ""


def test_a_failed_reading_is_recorded_and_left_unscored():
    server = FakeOpenAIServer(refuse={"chat/completions": 503})
    with server, Reader(ReaderConfig(server.base_url, "fake-model")) as reader:
        fields = answer_fields(reader, QUERY, DOCS)
    assert "answer_em" not in fields and "answer_f1" not in fields
    assert fields["reader"]["error"].startswith("model_server_error")


def test_the_judge_is_asked_with_the_gold_answers():
    def reply(n: int, body: dict) -> str:
        return "Calder" if n == 1 else "correct"

    with FakeOpenAIServer(reply=reply) as server:
        config = ReaderConfig(server.base_url, "fake-model")
        with Reader(config, judge=config) as reader:
            fields = answer_fields(reader, QUERY, DOCS, judge=True)
    assert fields["answer_em"] == 0.0 and fields["answer_judge"] == 1.0
    judge_prompt = server.requests[1]["body"]["messages"][1]["content"]
    assert (
        "Gold answer(s): Calder Falls" in judge_prompt
        and "Predicted answer: Calder" in judge_prompt
    )


def _set_answers(folder: Path, answers: dict[str, object]) -> None:
    path = folder / "queries.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["metadata"] = {"answer": answers[row["_id"]]}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_eval_with_a_reader_reports_answer_em_and_f1(beir, tmp_path, capsys):  # noqa: F811
    _set_answers(beir, {"q-opera": "Calder Falls", "q-keeper": ["weather", "the weather"]})
    rows_file = tmp_path / "rows.jsonl"

    def reply(n: int, body: dict) -> str:
        question = body["messages"][1]["content"].rsplit("Question:", 1)[1]
        return "Calder Falls" if "opera" in question else "ships"

    with FakeOpenAIServer(hosted=True, reply=reply) as server:
        code = main(
            ["eval", str(beir), "--index-dir", str(tmp_path / "idx"), "--json"]
            + ["--out", str(rows_file), "--reader", server.base_url]
        )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["answer_em"] == 0.5 and summary["answer_f1"] == 0.5
    assert summary["answer_n"] == 2 and summary["reader_errors"] == 0
    rows = [json.loads(r) for r in rows_file.read_text().splitlines()]
    assert [r["reader_answer"] for r in rows] == ["Calder Falls", "ships"]
    assert rows[0]["reader"]["model"] == "fake-model"  # from /v1/models
    assert rows[0]["reader"]["doc_ids"]  # the curated set, not nothing


def test_eval_reader_flags_without_a_reader_are_refused(beir, tmp_path, capsys):  # noqa: F811
    code = main(["eval", str(beir), "--index-dir", str(tmp_path / "idx"), "--reader-judge"])
    assert code == 2
    assert "--reader-judge needs --reader URL" in capsys.readouterr().err


def test_eval_without_a_reader_has_no_answer_keys(beir, tmp_path, capsys):  # noqa: F811
    assert main(["eval", str(beir), "--index-dir", str(tmp_path / "idx"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert not {"answer_em", "answer_f1", "answer_n", "reader_errors"} & set(summary)


@needs_vllm
def test_the_real_reader_answers_from_the_gold_paragraph():
    """SmolLM2-135M answers from one short paragraph: checks the call and the recording,
    not the model's skill (its answer is scored, whatever it is)."""
    config = ReaderConfig(VLLM_URL, base_model(), max_tokens=16)
    with Reader(config) as reader:
        fields = answer_fields(reader, QUERY, DOCS[:1])
    call = fields["reader"]
    assert call["error"] == "", call["error"]
    assert call["prompt_tokens"] > 20 and 0 < call["completion_tokens"] <= 16
    assert fields["reader_answer"] == clean_answer(call["raw"])
    assert 0.0 <= fields["answer_f1"] <= 1.0 and fields["answer_em"] in (0.0, 1.0)


def test_eval_with_an_unreachable_reader_stops_before_any_episode(beir, tmp_path, capsys):  # noqa: F811
    code = main(
        [
            "eval",
            str(beir),
            "--index-dir",
            str(tmp_path / "idx"),
            "--reader",
            "http://127.0.0.1:9/v1",
        ]
    )
    assert code == 2
    assert "cannot list the models of http://127.0.0.1:9/v1" in capsys.readouterr().err
