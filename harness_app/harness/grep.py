"""grep_corpus: a bounded regular-expression scan over the corpus.

Python's `re` cannot be interrupted in the middle of a match, so the bounds are layered and
the docs say exactly what each one buys:

1. Validation before any scan: the pattern must compile, be at most `max_pattern_chars`
   long, not match the empty string (it would match every document), use no
   backreferences, and contain no quantified group that itself contains a quantifier
   (``(a+)+``, ``(\\w*x)*``), the usual shape of catastrophic backtracking. This is a
   cheap heuristic, not a proof: some exponential patterns still pass.
2. Each document is searched only in its first `doc_chars` characters (title + text),
   which caps the input of any single match call.
3. Between documents the scan stops at a wall-clock deadline (`time_limit_s`, the clock is
   read every 16th document), after `max_scan_chars` characters in total, or once
   `max_hits` documents matched.

So one call takes at most the deadline plus 16 match calls over at most `doc_chars`
characters each. That is milliseconds for anything that passed step 1, except an
exponential pattern the heuristic missed: for those the bound is the honest one, "until the
match over one document returns". A scan cut short by the deadline may find different hits
on a slower machine; the result says when and why it stopped.

Matching is case-sensitive, as in Python. A pattern starting with `(?i)` ignores case, at
about seven times the cost on literal text, because `re` then loses its literal fast path.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness_app.harness.compress import clip
from harness_app.harness.types import Document

CONTEXT_CHARS = 70
# Reading the clock costs about as much as a failed literal search, so every 16th document.
_CLOCK_EVERY = 16

# A group holding a quantifier, itself followed by a quantifier: (x+)+, (x*y)*, (x{2,})+
_NESTED_QUANTIFIER = re.compile(
    r"\((?:[^()\\]|\\.)*(?:[+*]|\{\d*,?\d*\})(?:[^()\\]|\\.)*\)\s*(?:[+*]|\{)"
)
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=")


class PatternError(ValueError):
    """The pattern was rejected; the message says why in words a model can act on."""


@dataclass(frozen=True, slots=True)
class GrepHit:
    doc: Document
    context: str  # the matched span with some text either side


@dataclass(slots=True)
class GrepOutcome:
    hits: list[GrepHit] = field(default_factory=list)
    scanned_docs: int = 0
    scanned_chars: int = 0
    stopped: str = ""  # "" (whole corpus scanned) | "hits" | "time" | "chars"


def compile_pattern(pattern: str, max_chars: int = 200) -> re.Pattern[str]:
    if not pattern.strip():
        raise PatternError("pattern is empty")
    if len(pattern) > max_chars:
        raise PatternError(f"pattern is {len(pattern)} characters; at most {max_chars} allowed")
    if _BACKREFERENCE.search(pattern):
        raise PatternError("backreferences (\\1, (?P=name)) are not allowed")
    if _NESTED_QUANTIFIER.search(pattern):
        raise PatternError(
            "nested quantifiers such as (a+)+ are not allowed (catastrophic backtracking)"
        )
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"invalid regular expression: {exc}") from None
    if compiled.search("") is not None:
        raise PatternError("pattern matches the empty string, so it would match every document")
    return compiled


def scan(
    documents: Iterable[Document],
    pattern: re.Pattern[str],
    *,
    max_hits: int = 5,
    time_limit_s: float = 0.25,
    max_scan_chars: int = 20_000_000,
    doc_chars: int = 20_000,
) -> GrepOutcome:
    outcome = GrepOutcome()
    search, clock = pattern.search, time.monotonic  # locals: this loop runs per document
    deadline = clock() + time_limit_s
    for doc in documents:
        if outcome.scanned_docs % _CLOCK_EVERY == 0 and clock() > deadline:
            outcome.stopped = "time"
            break
        if outcome.scanned_chars >= max_scan_chars:
            outcome.stopped = "chars"
            break
        haystack = f"{doc.title}\n{doc.text}"[:doc_chars]
        outcome.scanned_docs += 1
        outcome.scanned_chars += len(haystack)
        match = search(haystack)
        if match is None:
            continue
        outcome.hits.append(GrepHit(doc, _context(haystack, match)))
        if len(outcome.hits) >= max_hits:
            outcome.stopped = "hits"
            break
    return outcome


def _context(haystack: str, match: re.Match[str]) -> str:
    start = max(match.start() - CONTEXT_CHARS, 0)
    end = min(match.end() + CONTEXT_CHARS, len(haystack))
    text = haystack[start:end].replace("\n", " — ")
    clipped = clip(text, 2 * CONTEXT_CHARS + 120)
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(haystack) and not clipped.endswith("…") else ""
    return prefix + clipped + suffix
