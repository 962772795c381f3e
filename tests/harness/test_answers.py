"""Answer scoring: SQuAD/HotpotQA normalisation, EM and token F1, aliases, yes/no."""

from __future__ import annotations

import pytest

from harness_app.harness.answers import (
    exact_match,
    normalize_answer,
    query_answers,
    score_answer,
    token_f1,
)
from harness_app.harness.types import QuerySpec


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   Apple,  a pear! ", "apple pear"),
        ("U.S.A.", "usa"),
        ("Theatre of the Absurd", "theatre of absurd"),  # "the" inside a word stays
        ("A", ""),
    ],
)
def test_normalisation_drops_case_punctuation_articles_and_extra_space(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_after_normalisation():
    assert exact_match("the Chief of Protocol.", ["Chief of Protocol"]) == 1.0
    assert exact_match("Chief of Protocol of the US", ["Chief of Protocol"]) == 0.0


def test_token_f1_counts_shared_tokens():
    # prediction: chief, protocol (2 tokens); gold: chief, of, protocol (3): p=1, r=2/3
    assert token_f1("Chief Protocol", ["Chief of Protocol"]) == pytest.approx(0.8)
    assert token_f1("Greenwich Village, New York City", ["Greenwich Village"]) == pytest.approx(
        2 * (2 / 5) * 1 / (2 / 5 + 1)
    )
    assert token_f1("nothing alike", ["Chief of Protocol"]) == 0.0


def test_best_alias_wins():
    golds = ["Johnny Cash", "John R. Cash"]
    assert exact_match("john r cash", golds) == 1.0
    assert token_f1("Cash", golds) == pytest.approx(2 * 1 * 0.5 / 1.5)


def test_yes_no_get_no_partial_credit():
    # "yes it is" shares "yes" with the gold, but HotpotQA gives 0 when they differ.
    assert token_f1("yes it is", ["yes"]) == 0.0
    assert token_f1("no", ["no way out"]) == 0.0
    assert token_f1("Yes.", ["yes"]) == 1.0
    assert exact_match("No", ["no"]) == 1.0


def test_no_gold_answer_is_unscored_not_zero():
    assert score_answer("Paris", []) is None
    assert score_answer("Paris", ["  "]) is None
    score = score_answer("Paris", ["paris", "Paris, France"])
    assert score is not None and (score.em, score.f1) == (1.0, 1.0)


def test_query_answers_reads_the_answer_and_every_alias_key():
    metadata = {
        "answer": "Johnny Cash",
        "answers": ["J. R. Cash"],
        "answer_aliases": ["John R. Cash", "Johnny Cash"],
    }
    assert query_answers("Johnny Cash", metadata) == ("Johnny Cash", "J. R. Cash", "John R. Cash")


def test_query_answers_splits_a_listed_answer_rather_than_its_joined_text():
    # The importers store ["a", "b"] as the answer text "a | b"; the scorer wants each.
    assert query_answers("1990 | nineteen ninety", {"answer": ["1990", "nineteen ninety"]}) == (
        "1990",
        "nineteen ninety",
    )
    assert query_answers("", {}) == ()


def test_query_spec_gold_answers_fall_back_to_the_answer():
    assert QuerySpec("q", "?", answer="Oslo").gold_answers == ("Oslo",)
    assert QuerySpec("q", "?", answer="Oslo", answers=("Oslo", "Christiania")).gold_answers == (
        "Oslo",
        "Christiania",
    )
    assert QuerySpec("q", "?").gold_answers == ()
