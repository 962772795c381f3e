"""BM25 sentence compression: the right sentences, in their original order."""

from __future__ import annotations

from harness_app.harness.compress import (
    GAP,
    compress,
    leading_snippet,
    top_sentence_indices,
)
from harness_app.harness.types import Document

DOC = Document(
    "d",
    "Test",
    "Alpha opens the story. Bravo mentions bridges and rivers. Charlie is about cooking. "
    "Delta returns to bridges over the river. Echo talks about weather. Foxtrot builds "
    "a bridge with steel.",
)


def test_keeps_the_top_scoring_sentences_in_original_order():
    indices = top_sentence_indices(DOC, "bridge river steel", k=3)
    assert indices == [1, 3, 5]
    text = compress(DOC, "bridge river steel", k=3)
    assert text.index("Bravo") < text.index("Delta") < text.index("Foxtrot")
    assert "Alpha" not in text and "Charlie" not in text
    assert text.count(GAP) == 2  # every kept sentence is separated by a dropped one


def test_adjacent_kept_sentences_are_joined_without_a_gap_mark():
    text = compress(DOC, "cooking bridges rivers", k=2)
    assert text == "Bravo mentions bridges and rivers. Charlie is about cooking."


def test_short_documents_are_shown_whole_and_no_match_falls_back_to_the_opening():
    short = Document("s", "", "One sentence. Two sentences.")
    assert compress(short, "anything", k=4) == "One sentence. Two sentences."
    assert top_sentence_indices(DOC, "zebra", k=2) == [0, 1]


def test_each_sentence_is_capped_and_the_leading_snippet_cuts_at_a_word():
    long_doc = Document("l", "", "Word " * 200 + "end. Second sentence here.")
    assert len(compress(long_doc, "word", k=1, sentence_chars=50)) <= 50
    snippet = leading_snippet(DOC, 30)
    assert snippet.endswith("…") and len(snippet) <= 30 and DOC.text.startswith(snippet[:-1])
