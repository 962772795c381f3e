"""The analyzer must tokenise and stem like Lucene's English analyzer (as Anserini uses it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness_app.harness import text as text_module
from harness_app.harness.text import (
    ENGLISH_STOP_WORDS,
    MAX_TOKEN_LENGTH,
    analyze,
    porter_stem,
    split_sentences,
    words,
)


def test_possessives_are_stripped_before_stop_words():
    assert words("John's book and the patients’ rooms") == [
        "john",
        "book",
        "and",
        "the",
        "patients",
        "rooms",
    ]
    # "it's" -> "it", which is then a stop word
    assert analyze("It's the dog's bone") == ["dog", "bone"]


def test_lucene_stop_words_are_removed_and_others_kept():
    assert analyze("The cat is on the mat") == ["cat", "mat"]
    # Lucene's list is short: "what", "which", "was not" etc. are not all stop words
    assert analyze("what was it") == ["what"]
    assert len(ENGLISH_STOP_WORDS) == 33


def test_standard_tokenizer_word_boundaries():
    assert words("e.g. 3.5mg p53 COVID-19 1,000 don't x_y a:b") == [
        "e.g",
        "3.5mg",
        "p53",
        "covid",
        "19",
        "1,000",
        "don't",
        "x_y",
        "a:b",
    ]
    # a period joins letters to letters and digits to digits, never a letter to a digit
    assert words("v1.2 a.1 end.") == ["v1.2", "a", "1", "end"]


def test_ideographs_are_single_tokens_and_combining_marks_stay_inside_words():
    assert words("中文abc") == ["中", "文", "abc"]
    assert words("cafe\u0301 au lait") == ["cafe\u0301", "au", "lait"]


def test_overlong_tokens_are_cut_like_lucene():
    pieces = words("a" * 600)
    assert [len(p) for p in pieces] == [MAX_TOKEN_LENGTH, MAX_TOKEN_LENGTH, 90]


def test_porter_stemming_classic_examples():
    examples = {
        "caresses": "caress",
        "ponies": "poni",
        "cats": "cat",
        "agreed": "agre",
        "disabled": "disabl",
        "matting": "mat",
        "mating": "mate",
        "meetings": "meet",
        "relational": "relat",
        "generalization": "gener",
        "hopeful": "hope",
        "electricity": "electr",
    }
    assert {w: porter_stem(w) for w in examples} == examples


def test_lucene_departures_from_the_published_porter_algorithm():
    # Snowball's "porter" (PyStemmer) gives m, trekk, archaeologi for these
    assert porter_stem("ms") == "ms"
    assert porter_stem("trekked") == "trek"
    assert analyze("archaeology") == analyze("archaeological") == ["archaeolog"]
    assert porter_stem("sensibly") == "sensibl"


def test_query_and_document_forms_meet():
    assert analyze("Running runners ran") == ["run", "runner", "ran"]
    assert analyze("vaccination") == analyze("vaccinations")


@given(st.text(max_size=200))
def test_analyze_yields_non_empty_lowercase_terms_without_stop_words(text):
    # Stop words go before stemming, as in Lucene's English analyzer: a stop word never
    # yields a term, but a stem may happen to spell one ("ASE" -> "as").
    for term in analyze(text):
        assert term
        assert term == term.lower()


def test_stop_words_go_before_stemming():
    for word in ENGLISH_STOP_WORDS:
        assert analyze(f"{word} {word.upper()} {word.title()}") == [], word
    assert analyze("ASE") == ["as"]


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_fast_path_tokenises_like_the_unicode_rules(text):
    lowered = text.lower()
    assert text_module._ASCII_TOKEN_RE.findall(lowered) == text_module._TOKEN_RE.findall(lowered)


def test_split_sentences():
    assert split_sentences("It rained. Then it stopped! Did it? yes") == [
        "It rained.",
        "Then it stopped!",
        "Did it? yes",
    ]
