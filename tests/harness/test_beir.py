"""The BEIR reader streams good files and names file, line and field for bad ones."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from harness_app.harness.beir import (
    BeirFormatError,
    beir_queries,
    iter_corpus,
    iter_queries,
    load_beir,
    read_qrels,
)
from harness_app.harness.types import Document


def write_lines(path: Path, *lines: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


def jsonl(*rows: object) -> list[str]:
    return [json.dumps(row) for row in rows]


def make_beir(root: Path) -> Path:
    write_lines(
        root / "corpus.jsonl",
        *jsonl(
            {"_id": "d1", "title": "Paris", "text": "Capital of France."},
            {"_id": "d2", "text": "No title here."},
        ),
        "",  # a trailing blank line is tolerated
    )
    write_lines(
        root / "queries.jsonl",
        *jsonl(
            {"_id": "q1", "text": "capital of France?", "metadata": {"answer": "Paris"}},
            {"_id": "q2", "text": "unjudged"},
            {"_id": "q3", "text": "aliases", "metadata": {"answer": ["a", "b"]}},
        ),
    )
    write_lines(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore", "q1\td1\t2", "q3\td2\t1")
    return root


def test_corpus_streams_documents_with_optional_title(tmp_path):
    root = make_beir(tmp_path)
    assert list(iter_corpus(root / "corpus.jsonl")) == [
        Document("d1", "Paris", "Capital of France."),
        Document("d2", "", "No title here."),
    ]


def test_queries_and_qrels(tmp_path):
    root = make_beir(tmp_path)
    queries = list(iter_queries(root / "queries.jsonl"))
    assert queries[1] == ("q2", "unjudged", {})
    assert read_qrels(root / "qrels" / "test.tsv") == {"q1": {"d1": 2}, "q3": {"d2": 1}}


def test_beir_queries_keeps_judged_queries_with_answers(tmp_path):
    specs = beir_queries(make_beir(tmp_path), "test")
    assert [(s.query_id, s.answer, s.qrels) for s in specs] == [
        ("q1", "Paris", {"d1": 2}),
        ("q3", "a | b", {"d2": 1}),
    ]
    assert specs[0].answer_docs == frozenset({"d1"})


def test_load_beir_gives_a_reusable_corpus_factory(tmp_path):
    data = load_beir(make_beir(tmp_path))
    assert [d.doc_id for d in data.corpus()] == ["d1", "d2"]
    assert [d.doc_id for d in data.corpus()] == ["d1", "d2"]
    assert len(data.queries) == 3
    assert data.qrels["q1"] == {"d1": 2}


def test_missing_split_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"qrels/dev\.tsv"):
        load_beir(make_beir(tmp_path), "dev")


def error_for(path: Path, reader=iter_corpus, **kwargs) -> BeirFormatError:
    with pytest.raises(BeirFormatError) as caught:
        result = reader(path, **kwargs)
        if not isinstance(result, dict):
            list(result)
    return caught.value


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ('{"_id": "d1", "text": "ok"', "", "malformed JSON"),
        ('["d1", "text"]', "", "expected a JSON object, got list"),
        ('{"text": "no id"}', "_id", "missing"),
        ('{"_id": "  ", "text": "blank id"}', "_id", "is blank"),
        ('{"_id": 7, "text": "numeric id"}', "_id", "must be a string, got int"),
        ('{"_id": "d2", "title": null, "text": "x"}', "title", "must be a string, got NoneType"),
        ('{"_id": "d2", "title": "t"}', "text", "missing"),
    ],
)
def test_bad_corpus_rows_name_file_line_and_field(tmp_path, row, field, message):
    path = write_lines(tmp_path / "corpus.jsonl", '{"_id": "d0", "text": "fine"}', row)
    error = error_for(path)
    assert (error.line, error.field) == (2, field)
    assert message in str(error)
    assert str(path) in str(error)
    assert "line 2" in str(error)


def test_non_utf8_bytes_report_the_line(tmp_path):
    path = write_lines(tmp_path / "corpus.jsonl", '{"_id": "a", "text": "x"}', b'{"_id": "\xff"}')
    error = error_for(path)
    assert error.line == 2
    assert "not valid UTF-8" in str(error)


def test_overlong_line_is_refused_without_reading_it_whole(tmp_path):
    long_row = json.dumps({"_id": "big", "text": "x" * 500})
    path = write_lines(tmp_path / "corpus.jsonl", '{"_id": "a", "text": "x"}', long_row)
    error = error_for(path, max_line_bytes=100)
    assert error.line == 2
    assert "longer than 100 bytes" in str(error)


def test_a_line_exactly_at_the_limit_is_fine(tmp_path):
    row = json.dumps({"_id": "a", "text": "x"})
    path = write_lines(tmp_path / "corpus.jsonl", row)
    assert len(list(iter_corpus(path, max_line_bytes=len(row)))) == 1


def test_duplicate_ids_name_both_lines_when_checked(tmp_path):
    path = write_lines(tmp_path / "corpus.jsonl", *jsonl(*[{"_id": i, "text": ""} for i in "aba"]))
    assert len(list(iter_corpus(path))) == 3  # not checked by default: it costs memory
    error = error_for(path, check_duplicates=True)
    assert error.line == 3
    assert "duplicate id 'a' (first on line 1)" in str(error)


def test_query_metadata_must_be_an_object(tmp_path):
    path = write_lines(tmp_path / "queries.jsonl", '{"_id": "q", "text": "t", "metadata": [1]}')
    error = error_for(path, reader=iter_queries)
    assert (error.line, error.field) == (1, "metadata")


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ("q1\td1", "", "expected 3 tab-separated columns"),
        ("q1\td1\t1\textra", "", "got 4"),
        ("q1\td1\thigh", "score", "not an integer: 'high'"),
        ("q1\t\t1", "corpus-id", "is blank"),
        ("q1\td1\t0", "score", "judged again with a different score"),
    ],
)
def test_bad_qrels_rows(tmp_path, row, field, message):
    path = write_lines(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore", "q1\td1\t1", row)
    error = error_for(path, reader=read_qrels)
    assert (error.line, error.field) == (3, field)
    assert message in str(error)


def test_qrels_header_is_optional_and_zero_grades_are_kept(tmp_path):
    path = write_lines(tmp_path / "test.tsv", "q1\td1\t1", "q1\td2\t0", "q1\td1\t1")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}}


def test_format_error_survives_pickling():
    # Celery moves exceptions between processes by pickling them.
    error = BeirFormatError("corpus.jsonl", 4, "is blank", "_id")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.line, copy.field) == (str(error), 4, "_id")
    assert isinstance(copy, ValueError)
