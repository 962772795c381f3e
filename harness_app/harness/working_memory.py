"""WORKINGMEMORY: the compact text rendering of the harness state shown every turn.

The model keeps nothing between turns that the harness does not show it again, so this is
its whole notebook; and because it is appended to every observation it is paid for every
turn, so each section is capped and repeats only ids the model has already been shown.
Sections, in order (a section with nothing to say is left out):

    <WORKINGMEMORY>
    QUESTION: <the question>
    CURATED <n>/<capacity>          grouped by tag, best first; low-tagged docs as bare ids
    very_high:
    - <id>: <snippet>
    POOL <shown> shown · <uncurated> uncurated · <k> near-dups hidden
    top uncurated: <id> <score> · ...
    SEARCHES <n> (last <m>): t<turn> <tool> "<query>" +<new> ...
    BRIDGES: <entity> [<id>, <id> +<more>] · ...
    VERIFIED "<claim>": <id> <verdict> <score> · ...
    BUDGET turn <t>/<max> · ~<used>/<limit> tokens (<pct>)   "~": an estimate (budget.py)
    WARNING <pct> of <turns|context> budget used: <advice>
    ENDED: <termination reason>
    </WORKINGMEMORY>

A title is printed only when it is not just the id spelled differently (HotpotQA ids are
titles with "_"), which saves a few tokens per line on Wikipedia corpora.
"""

from __future__ import annotations

import heapq
import re
from functools import lru_cache

from harness_app.harness.ablation import Ablation
from harness_app.harness.budget import BudgetStatus, render_budget
from harness_app.harness.compress import clip
from harness_app.harness.config import HarnessConfig
from harness_app.harness.state import IMPORTANCE_LEVELS, HarnessState
from harness_app.harness.tools import FAN_OUT_SEARCH, GREP_CORPUS, SEARCH_CORPUS

_NON_ALNUM = re.compile(r"[\W_]+")
_TOOL_ABBREV = {SEARCH_CORPUS: "search", FAN_OUT_SEARCH: "fan_out", GREP_CORPUS: "grep"}


def render_working_memory(
    state: HarnessState,
    config: HarnessConfig,
    ablation: Ablation,
    *,
    exact_tokens: bool | None = False,
) -> str:
    """`exact_tokens`: whether the BUDGET line's tokens are real (no "~"), or None when the
    policy owns the context and the line shows turns only (budget.py)."""
    sections = [
        f"QUESTION: {state.question}",
        _curated(state, config),
        _pool(state, config),
        _searches(state, config),
        _bridges(state, config) if ablation.evidence_graph else "",
        _verifications(state, config) if ablation.verification else "",
        _budget(state, config, exact_tokens) if ablation.budget_marker else "",
        f"ENDED: {state.termination_reason}" if state.done else "",
    ]
    body = "\n".join(s for s in sections if s)
    return f"<WORKINGMEMORY>\n{body}\n</WORKINGMEMORY>"


@lru_cache(maxsize=16_384)
def doc_label(doc_id: str, title: str) -> str:
    """`id`, or `id "title"` when the title says something the id does not."""
    if not title or _NON_ALNUM.sub("", doc_id).lower() == _NON_ALNUM.sub("", title).lower():
        return doc_id
    return f'{doc_id} "{clip(title, 60)}"'


def _curated(state: HarnessState, config: HarnessConfig) -> str:
    header = f"CURATED {len(state.curated)}/{config.curated_capacity}"
    if not state.curated:
        return f"{header} (empty)"
    lines = [header]
    for tag in IMPORTANCE_LEVELS:
        ids = [d for d, item in state.curated.items() if item.importance == tag]
        if not ids:
            continue
        if tag == "low":
            lines.append(f"low: {', '.join(ids)}")
            continue
        lines.append(f"{tag}:")
        lines.extend(f"- {_curated_line(state, d, config.wm_snippet_chars)}" for d in ids)
    return "\n".join(lines)


def _curated_line(state: HarnessState, doc_id: str, chars: int) -> str:
    entry = state.memory.get(doc_id)
    if entry is None:
        kept = state.suppressed.get(doc_id, "")
        return f"{doc_id}: (near-duplicate of {kept})" if kept else doc_id
    return _doc_line(doc_id, entry.title, entry.snippet, chars)


@lru_cache(maxsize=16_384)
def _doc_line(doc_id: str, title: str, snippet: str, chars: int) -> str:
    # Cached: a curated doc's line is identical on every turn it stays curated.
    short = clip(snippet, chars) if chars > 0 else ""
    label = doc_label(doc_id, title)
    return f"{label}: {short}" if short else label


def _pool(state: HarnessState, config: HarnessConfig) -> str:
    if not state.shown:
        return ""
    uncurated = [e for e in state.pool.values() if e.doc_id not in state.curated]
    line = f"POOL {len(state.shown)} shown · {len(uncurated)} uncurated"
    if state.suppressed:
        line += f" · {len(state.suppressed)} near-dups hidden"
    top = heapq.nlargest(config.wm_top_candidates, uncurated, key=lambda e: e.score)
    if not top:
        return line
    listed = " · ".join(f"{e.doc_id} {e.score:.1f}" if e.score else e.doc_id for e in top)
    return f"{line}\ntop uncurated: {listed}"


def _searches(state: HarnessState, config: HarnessConfig) -> str:
    if not state.searches:
        return ""
    recent = state.searches[-config.wm_recent_searches :]
    items = []
    for record in recent:
        tool = _TOOL_ABBREV.get(record.tool, record.tool)
        query = clip(record.query, 60)
        dup = f" ({len(record.suppressed)} dup)" if record.suppressed else ""
        items.append(f't{record.turn} {tool} "{query}" +{len(record.hit_ids)}{dup}')
    return f"SEARCHES {len(state.searches)} (last {len(recent)}): " + "; ".join(items)


def _bridges(state: HarnessState, config: HarnessConfig) -> str:
    bridges = state.graph.top_bridges(state.curated, config.wm_bridges)
    if not bridges:
        return ""
    items = []
    for entity in bridges:
        ids = entity.doc_ids[:3]
        more = f" +{len(entity.doc_ids) - 3}" if len(entity.doc_ids) > 3 else ""
        items.append(f"{clip(entity.label, 40)} [{', '.join(ids)}{more}]")
    return "BRIDGES: " + " · ".join(items)


def _verifications(state: HarnessState, config: HarnessConfig) -> str:
    if not state.verifications:
        return ""
    by_claim: dict[str, list[str]] = {}
    for record in state.verifications[-config.wm_verifications :]:
        by_claim.setdefault(record.claim, []).append(
            f"{record.doc_id} {record.verdict} {record.score:.2f}"
        )
    return "\n".join(
        f'VERIFIED "{clip(claim, 70)}": ' + " · ".join(items) for claim, items in by_claim.items()
    )


def _budget(state: HarnessState, config: HarnessConfig, exact_tokens: bool | None) -> str:
    status = BudgetStatus(
        state.turns_used,
        config.max_turns,
        state.tokens_used,
        config.context_token_limit,
        exact_tokens,
    )
    return render_budget(status, config.budget_warnings)
