"""Answer scoring in the SQuAD/HotpotQA way: normalised exact match and token F1.

A prediction is scored against every gold answer a query has (its answer and any aliases)
and keeps the best score. Normalisation lowercases, drops ASCII punctuation and the
articles a/an/the, and collapses whitespace. As in HotpotQA's official scorer, an answer
that normalises to yes, no or noanswer gets F1 0 against a different gold answer, so a
"yes" never earns partial credit from sharing a token with a longer gold answer.

Where the gold answers come from (`query_answers`): a query's `answer` text, and in its
metadata `answer` when it is a list (the importers join such a list with " | " into the
answer text), `answers` (a list) and `answer_aliases` (a list). Blank and repeated
answers are dropped; the order is kept.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Answers HotpotQA's scorer refuses partial credit for.
CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})
# Metadata keys that may hold more gold answers, each a list of strings.
ALIAS_KEYS = ("answers", "answer_aliases")


def normalize_answer(text: str) -> str:
    """Lowercase, no punctuation, no articles, single spaces."""
    lowered = text.lower()
    no_punctuation = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punctuation)
    return " ".join(no_articles.split())


def _f1_one(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction), normalize_answer(gold)
    if (predicted in CLOSED_ANSWERS or expected in CLOSED_ANSWERS) and predicted != expected:
        return 0.0
    predicted_tokens, gold_tokens = predicted.split(), expected.split()
    same = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(predicted_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in golds))


def token_f1(prediction: str, golds: Iterable[str]) -> float:
    """The best token F1 of the prediction against any gold answer (0.0 with none)."""
    return max((_f1_one(prediction, gold) for gold in golds), default=0.0)


@dataclass(frozen=True, slots=True)
class AnswerScore:
    em: float
    f1: float


def score_answer(prediction: str, golds: Iterable[str]) -> AnswerScore | None:
    """EM and F1 against the gold answers; None when there is no gold answer to score by."""
    answers = [gold for gold in golds if gold.strip()]
    if not answers:
        return None
    return AnswerScore(em=exact_match(prediction, answers), f1=token_f1(prediction, answers))


def query_answers(answer: str, metadata: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """Every gold answer of a query: its answer text (or the list it was joined from) and
    the aliases in its metadata."""
    metadata = metadata or {}
    listed = metadata.get("answer")
    found: list[str] = [str(a) for a in listed] if isinstance(listed, list) else [answer]
    for key in ALIAS_KEYS:
        aliases = metadata.get(key)
        if isinstance(aliases, list):
            found += [str(a) for a in aliases]
        elif isinstance(aliases, str):
            found.append(aliases)
    return tuple(dict.fromkeys(a.strip() for a in found if a.strip()))
