"""Text analysis shared by retrieval, compression, dedup and the evidence graph.

`analyze` mirrors the analyzer Anserini uses for its BEIR "flat" indexes, so BM25 scores
here reproduce the published reference figures:

    StandardTokenizer -> EnglishPossessiveFilter -> LowerCaseFilter
        -> StopFilter (Lucene's 33 English stop words) -> PorterStemFilter

- Tokenisation follows the Unicode word-boundary rules (UAX #29) that Lucene's
  StandardTokenizer implements: letters and digits join across `_`; a period, colon,
  middle dot or apostrophe joins two letters ("e.g", "u.s", "don't"); a period, comma,
  semicolon or apostrophe joins two digits ("3.5", "1,000"); letters and digits join each
  other ("p53", "3.5mg"); ideographs and hiragana are one token each; tokens longer than
  255 characters are cut into 255-character pieces.
- The stemmer is Lucene's variant of Porter's algorithm (Porter's own reference code),
  which differs from the published algorithm and from Snowball's "porter" (what PyStemmer
  ships): words of one or two letters are left alone ("ms" stays "ms"), "-bli" becomes
  "-ble" (not only "-abli"), "-logi" becomes "-log", and any doubled consonant other than
  l, s, z is undoubled after -ed/-ing ("trekked" -> "trek").

One deliberate deviation: the typographic apostrophe (’) is folded into ' so that
"don’t" and "don't" are the same term; Lucene would keep them apart.
"""

from __future__ import annotations

import re
import unicodedata

# Lucene's EnglishAnalyzer default stop set.
ENGLISH_STOP_WORDS = frozenset(
    (
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
        "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
        "there", "these", "they", "this", "to", "was", "will", "with",
    )
)  # fmt: skip

MAX_TOKEN_LENGTH = 255  # Lucene StandardTokenizer's default

# Bumped whenever analyze() changes its output, so persisted indexes built with the old
# analyzer are recognised as stale and rebuilt.
ANALYZER_VERSION = "lucene-english-1"


def _combining_class() -> str:
    """A regex class body for combining marks and format characters in the BMP.

    UAX #29 (rule WB4) makes these invisible to word breaking, so "cafe\u0301" and
    "co\u00adoperate" stay one token. Python's \\w does not include them.
    """
    ranges: list[list[int]] = []
    for cp in range(0x10000):
        category = unicodedata.category(chr(cp))
        if category in ("Mn", "Mc", "Me") or (category == "Cf" and cp != 0x200B):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "".join(f"\\u{lo:04x}" if lo == hi else f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in ranges)


# Word-break property classes from UAX #29 (the characters that matter in practice).
_MID_LETTER = r":\u00b7\u0387\u05f4\u2027\ufe13\ufe55\uff1a"
_MID_NUM = r",;\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b"
_MID_NUM_LET = r".'\u2018\u2019\u2024\ufe52\uff07\uff0e"
_LETTER = r"[^\W\d_]"
_PART = rf"[\w{_combining_class()}]"

# A token starts with a letter or digit (optionally after underscores) and may continue
# through a "mid" character only when a letter or digit of the right kind is on both sides.
_TOKEN_RE = re.compile(
    rf"_*[^\W_]{_PART}*"
    rf"(?:(?=[{_MID_LETTER}{_MID_NUM}{_MID_NUM_LET}])"
    rf"(?:(?<={_LETTER})[{_MID_LETTER}{_MID_NUM_LET}](?={_LETTER})"
    rf"|(?<=\d)[{_MID_NUM}{_MID_NUM_LET}](?=\d)){_PART}+)*"
)
# The same rules for ASCII-only text, where every class collapses to a few characters;
# about a quarter faster, and most corpora are mostly ASCII. The lookahead before the
# alternation lets the common case (a word followed by a space) fail in one step.
_ASCII_TOKEN_RE = re.compile(
    r"_*[a-z0-9]\w*(?:(?=[:.',;])(?:(?<=[a-z])[:.'](?=[a-z])|(?<=[0-9])[,;.'](?=[0-9]))\w+)*",
    re.ASCII,
)
# Han ideographs and hiragana are single-character tokens in StandardTokenizer.
_CJK_RE = re.compile(r"[\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_POSSESSIVE_SUFFIXES = ("'s", "’s", "＇s")


def _tokens(text: str) -> list[str]:
    """Lower-cased StandardTokenizer tokens (before possessive stripping)."""
    text = text.lower()
    if text.isascii():
        tokens: list[str] = _ASCII_TOKEN_RE.findall(text)
    else:
        if _CJK_RE.search(text):
            text = _CJK_RE.sub(r" \g<0> ", text)
        tokens = _TOKEN_RE.findall(text)
    if tokens and max(map(len, tokens)) > MAX_TOKEN_LENGTH:
        tokens = [
            tok[i : i + MAX_TOKEN_LENGTH]
            for tok in tokens
            for i in range(0, len(tok), MAX_TOKEN_LENGTH)
        ]
    return tokens


def _word(token: str) -> str:
    if token.endswith(_POSSESSIVE_SUFFIXES):
        token = token[:-2]
    return token.replace("’", "'")


def words(text: str) -> list[str]:
    """Lower-cased word tokens with possessives stripped; no stop-wording or stemming."""
    return [_word(tok) for tok in _tokens(text)]


# token -> analysed term ("" for a stop word). Tokens repeat heavily (Zipf), so caching the
# whole possessive/stop/stem chain per distinct token makes analysis about 5x faster.
_TERM_CACHE: dict[str, str] = {}
_TERM_CACHE_LIMIT = 2_000_000


def _term(token: str) -> str:
    word = _word(token)
    term = "" if word in ENGLISH_STOP_WORDS else porter_stem(word)
    if len(_TERM_CACHE) >= _TERM_CACHE_LIMIT:
        _TERM_CACHE.clear()
    _TERM_CACHE[token] = term
    return term


def analyze(text: str) -> list[str]:
    """Index/query terms: words minus stop words, Porter-stemmed (Lucene's variant)."""
    tokens = _tokens(text)
    terms = list(map(_TERM_CACHE.get, tokens))  # C-level loops: this runs on every document
    if None in terms:
        terms = [
            _term(tok) if term is None else term for term, tok in zip(terms, tokens, strict=True)
        ]
    return list(filter(None, terms))


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences on terminal punctuation followed by a capital or digit."""
    parts = [p.strip() for p in _SENTENCE_RE.split(text)]
    return [p for p in parts if p]


# --- Porter stemmer, Lucene's variant --------------------------------------------------
# Written from the algorithm (Porter 1980) plus the three departures Lucene's
# PorterStemmer makes; see the module docstring.


def _consonants(word: str) -> list[bool]:
    """Per character: is it a consonant? 'y' is one at the start or after a vowel."""
    out: list[bool] = []
    for i, ch in enumerate(word):
        if ch in "aeiou":
            out.append(False)
        elif ch == "y":
            out.append(i == 0 or not out[i - 1])
        else:
            out.append(True)
    return out


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: the number of vowel-to-consonant transitions."""
    cons = _consonants(stem)
    return sum(1 for i in range(1, len(cons)) if cons[i] and not cons[i - 1])


def _has_vowel(stem: str) -> bool:
    return not all(_consonants(stem))


def _ends_double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonants(word)[-1]


def _ends_cvc(word: str) -> bool:
    """Consonant-vowel-consonant at the end, the last not w, x or y (e.g. hop, not snow)."""
    if len(word) < 3:
        return False
    c = _consonants(word)
    return c[-3] and not c[-2] and c[-1] and word[-1] not in "wxy"


_STEP2 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP3 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_STEP4 = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def _step1(word: str) -> str:
    """Plurals, -ed, -ing, and terminal y -> i."""
    if word.endswith("s"):
        if word.endswith(("sses", "ies")):  # -> -ss, -i
            word = word[:-2]
        elif word[-2] != "s":
            word = word[:-1]
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    elif (word.endswith("ed") and _has_vowel(word[:-2])) or (
        word.endswith("ing") and _has_vowel(word[:-3])
    ):
        word = word[:-2] if word.endswith("ed") else word[:-3]
        if word.endswith(("at", "bl", "iz")):
            word += "e"
        elif _ends_double_consonant(word) and word[-1] not in "lsz":
            word = word[:-1]
        elif _measure(word) == 1 and _ends_cvc(word):
            word += "e"
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    return word


def _replace_suffix(word: str, rules: tuple[tuple[str, str], ...]) -> str:
    """Apply the first rule whose suffix matches, if the remaining stem has m > 0."""
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if _measure(stem) > 0 else word
    return word


def _step4(word: str) -> str:
    """Drop -ant, -ence, -ion etc. when the stem has m > 1."""
    if len(word) < 2:
        return word
    if word[-2] == "o":
        if word.endswith("ion") and len(word) > 3 and word[-4] in "st":
            suffix = "ion"
        elif word.endswith("ou"):
            suffix = "ou"
        else:
            return word
    else:
        suffix = next((s for s in _STEP4.get(word[-2], ()) if word.endswith(s)), "")
        if not suffix:
            return word
    stem = word[: -len(suffix)]
    return stem if _measure(stem) > 1 else word


def _step5(word: str) -> str:
    """Drop a final -e, and -ll -> -l, on long enough stems."""
    if word.endswith("e"):
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _ends_cvc(word[:-1])):
            word = word[:-1]
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


def porter_stem(word: str) -> str:
    """Porter-stem a lower-cased word the way Lucene's PorterStemFilter does."""
    if len(word) <= 2:
        return word
    word = _step1(word)
    if len(word) > 1:
        word = _replace_suffix(word, _STEP2.get(word[-2], ()))
    word = _replace_suffix(word, _STEP3.get(word[-1], ()))
    word = _step4(word)
    return _step5(word)
