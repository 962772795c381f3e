"""The tool handlers: what each tool does to the state and the text it answers with.

`ToolRunner` receives arguments already validated against the tool's schema (tools.py) and
raises `ToolFailure` for problems only the state can detect, such as an id never shown;
the environment turns that into a format-error result. Everything a document contributes
(compressed view, fingerprint, entities) comes from its `DocAnalysis` (analysis.py): read
from the corpus index when the retriever stored one, else computed and cached per document
content in the mechanism modules; so handlers stay cheap and episodes with different
ablations share nothing mutable.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from itertools import chain, zip_longest
from typing import Any

from harness_app.harness.ablation import Ablation
from harness_app.harness.analysis import DocAnalysis, analysis_provider
from harness_app.harness.compress import clip, leading_snippet
from harness_app.harness.config import HarnessConfig
from harness_app.harness.curation import apply_curation
from harness_app.harness.dedup import DedupIndex
from harness_app.harness.grep import GrepOutcome, compile_pattern, scan
from harness_app.harness.state import (
    VERDICTS,
    HarnessState,
    MemoryEntry,
    PoolEntry,
    SearchRecord,
    VerificationRecord,
)
from harness_app.harness.tools import (
    CURATE,
    END_SEARCH,
    FAN_OUT_SEARCH,
    GREP_CORPUS,
    READ_DOCUMENT,
    REVIEW_DOCS,
    SEARCH_CORPUS,
    SEARCH_TOOLS,
    VERIFY,
)
from harness_app.harness.types import Document, Retriever, SearchHit
from harness_app.harness.verify import LexicalVerifier, Verifier
from harness_app.harness.working_memory import doc_label

_BACKFILL_ROUNDS = 3
_FINAL_REASONING_CHARS = 2000


class ToolFailure(ValueError):
    """The call was well-formed but cannot be carried out (e.g. an id never shown)."""


class ToolRunner:
    """Runs validated tool calls against one episode's state."""

    def __init__(
        self,
        *,
        state: HarnessState,
        retriever: Retriever,
        config: HarnessConfig,
        ablation: Ablation,
        verifier: Verifier,
        dedup: DedupIndex,
    ) -> None:
        self.state = state
        self.retriever = retriever
        self.config = config
        self.ablation = ablation
        self.verifier = verifier
        self.dedup = dedup
        self.analysis = analysis_provider(retriever)
        self.new_shown: list[str] = []
        self.events_from = 0
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            SEARCH_CORPUS: self.search_corpus,
            FAN_OUT_SEARCH: self.fan_out_search,
            GREP_CORPUS: self.grep_corpus,
            READ_DOCUMENT: self.read_document,
            REVIEW_DOCS: self.review_docs,
            CURATE: self.curate,
            VERIFY: self.verify,
            END_SEARCH: self.end_search,
        }

    def begin_turn(self) -> None:
        self.new_shown = []
        self.events_from = len(self.state.curation_log)

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        return self._handlers[name](arguments)

    def rebuild_indexes(self) -> None:
        """Re-derive the dedup index from document memory after a restore."""
        if self.ablation.dedup:
            for doc_id in self.state.memory:
                doc = self.retriever.document(doc_id)
                self.dedup.add_fingerprint(doc_id, self.analysis(doc).fingerprint())

    # -- search tools ----------------------------------------------------------------------

    def search_corpus(self, arguments: dict[str, Any]) -> str:
        first = self._is_first_search()
        query = arguments["query"].strip()
        text, shown = self._search_block(query, self.config.search_k, SEARCH_CORPUS)
        return text + self._auto_seed(shown, first)

    def fan_out_search(self, arguments: dict[str, Any]) -> str:
        first = self._is_first_search()
        blocks, per_query = [], []
        for query in arguments["queries"]:
            text, shown = self._search_block(query.strip(), self.config.fan_out_k, FAN_OUT_SEARCH)
            blocks.append(text)
            per_query.append(shown)
        # Seed round-robin so every sub-question is represented in the seeded set.
        ranked = [d for d in chain.from_iterable(zip_longest(*per_query)) if d is not None]
        return "\n".join(blocks) + self._auto_seed(ranked, first)

    def _is_first_search(self) -> bool:
        return not any(record.tool in SEARCH_TOOLS for record in self.state.searches)

    def _search_block(self, query: str, k: int, tool: str) -> tuple[str, list[str]]:
        state = self.state
        lines: list[str] = []
        shown: list[str] = []
        hidden: list[tuple[str, str]] = []
        # Hidden near-duplicates would leave the model with fewer than k results, so ask
        # again for the shortfall (they are excluded now); a few rounds at most.
        for _ in range(_BACKFILL_ROUNDS):
            # Hidden near-duplicates were returned once too: they are not returned again.
            exclude: Collection[str] = (
                state.shown.keys() | state.suppressed.keys() if state.suppressed else state.shown
            )
            hits = self.retriever.search(query, k=k - len(shown), exclude=exclude)
            hidden_before = len(hidden)
            for hit in hits:
                if hit.doc_id in state.shown or hit.doc_id in state.suppressed:
                    continue  # a retriever that ignores `exclude` must not repeat results
                line = self._show_hit(hit, query, tool, hidden)
                if line:
                    lines.append(line)
                    shown.append(hit.doc_id)
            if len(hidden) == hidden_before or len(shown) >= k or not hits:
                break
        state.searches.append(SearchRecord(state.turn, tool, query, shown, [d for d, _ in hidden]))
        return _search_text(query, lines, hidden), shown

    def _show_hit(
        self, hit: SearchHit, query: str, tool: str, hidden: list[tuple[str, str]]
    ) -> str:
        """The hit's result line, or "" when it is hidden as a near-duplicate."""
        doc = self.retriever.document(hit.doc_id)
        analysis = self.analysis(doc)
        kept = self.dedup.near_duplicate(analysis.fingerprint()) if self.ablation.dedup else None
        if kept is not None:
            self.state.suppressed[doc.doc_id] = kept
            if self.config.hidden_duplicates_count_as_shown:
                self._mark_shown(doc.doc_id)
            hidden.append((doc.doc_id, kept))
            return ""
        if self.ablation.compression:
            config = self.config
            view = analysis.compressed(query, config.compress_sentences, config.sentence_chars)
        else:
            view = leading_snippet(doc, self.config.snippet_chars)
        self._register(doc, view, score=hit.score, query=query, source=tool, analysis=analysis)
        return f"- {doc_label(doc.doc_id, doc.title)} ({hit.score:.3g}): {view}"

    def _auto_seed(self, ranked_ids: list[str], first_search: bool) -> str:
        if not (self.ablation.auto_seed and first_search and ranked_ids) or self.state.curated:
            return ""
        count = min(self.config.auto_seed_count, self.config.curated_capacity)
        seeds = ranked_ids[:count]
        apply_curation(
            self.state,
            add=[(d, "fair") for d in seeds],
            remove=[],
            capacity=self.config.curated_capacity,
            tags_enabled=self.ablation.importance_tags,
            detail="auto_seed",
        )
        return (
            f"\nAuto-seeded the empty curated set with the top {len(seeds)} at fair: "
            f"{', '.join(seeds)}. Retag or remove them with curate."
        )

    def grep_corpus(self, arguments: dict[str, Any]) -> str:
        raw = arguments["pattern"]
        pattern = compile_pattern(raw, self.config.grep_max_pattern_chars)
        outcome = scan(
            self.retriever.iter_documents(),
            pattern,
            max_hits=self.config.grep_max_hits,
            time_limit_s=self.config.grep_time_limit_s,
            max_scan_chars=self.config.grep_max_scan_chars,
            doc_chars=self.config.grep_doc_chars,
        )
        lines, ids = [], []
        for hit in outcome.hits:
            doc = hit.doc
            seen = doc.doc_id in self.state.memory
            if not seen:
                self._register(doc, hit.context, score=0.0, query=f"grep:{raw}", source=GREP_CORPUS)
            self._mark_shown(doc.doc_id)
            lines.append(
                f"- {doc_label(doc.doc_id, doc.title)}{' (seen)' if seen else ''}: {hit.context}"
            )
            ids.append(doc.doc_id)
        self.state.searches.append(SearchRecord(self.state.turn, GREP_CORPUS, raw, ids))
        header = f"grep /{raw}/: {len(ids)} matching docs {self._grep_status(outcome)}"
        return "\n".join([header, *lines])

    def _grep_status(self, outcome: GrepOutcome) -> str:
        total = len(self.retriever)
        scanned = f"{outcome.scanned_docs} of {total} docs"
        if outcome.stopped == "hits":
            return f"(stopped at {self.config.grep_max_hits} matches; scanned {scanned})"
        if outcome.stopped == "time":
            limit = self.config.grep_time_limit_s
            return f"(time limit {limit}s reached after {scanned}; the rest was not searched)"
        if outcome.stopped == "chars":
            return f"(scan size limit reached after {scanned}; the rest was not searched)"
        return f"(scanned all {scanned})"

    # -- documents -------------------------------------------------------------------------

    def read_document(self, arguments: dict[str, Any]) -> str:
        doc_id = arguments["doc_id"].strip()
        if doc_id not in self.retriever:
            raise ToolFailure(f"unknown doc id {doc_id!r}: no such document in the corpus")
        doc = self.retriever.document(doc_id)
        limit = self.config.read_max_chars
        text = doc.text[:limit]
        if len(doc.text) > limit:
            text += f" [… {len(doc.text) - limit} more characters not shown]"
        self._register(
            doc,
            leading_snippet(doc, self.config.memory_snippet_chars),
            score=0.0,
            query="read",
            source=READ_DOCUMENT,
            read=True,
        )
        return f"{doc_label(doc.doc_id, doc.title)}\n{text}"

    def review_docs(self, arguments: dict[str, Any]) -> str:
        ids = _unique(arguments["doc_ids"])
        state = self.state
        hidden_ok = self.config.hidden_duplicates_count_as_shown
        unknown = [
            d for d in ids if d not in state.memory and not (hidden_ok and d in state.suppressed)
        ]
        if unknown:
            raise ToolFailure(
                _not_shown_message(unknown, state)
                + " (review_docs only recalls documents already shown)"
            )
        return "\n".join(self._memory_card(d) for d in ids)

    def _memory_card(self, doc_id: str) -> str:
        state = self.state
        entry = state.memory.get(doc_id)
        if entry is None:
            kept = state.suppressed[doc_id]
            return f"- {doc_id}: hidden as a near-duplicate of {kept}; review {kept} instead"
        lines = [f"- {doc_label(doc_id, entry.title)} ({'; '.join(self._card_facts(entry))})"]
        lines.append(f"  {self._review_text(entry)}")
        if self.ablation.evidence_graph:
            entities = [e.label for e in state.graph.entities_of(doc_id)[:8]]
            if entities:
                lines.append(f"  entities: {', '.join(entities)}")
        checks = [v for v in state.verifications if v.doc_id == doc_id][-3:]
        lines.extend(f'  verified "{clip(v.claim, 80)}": {v.verdict} {v.score:.2f}' for v in checks)
        return "\n".join(lines)

    def _review_text(self, entry: MemoryEntry) -> str:
        """The stored text of the document, re-read as Harness-1 does, or the card's view."""
        if not self.config.review_docs_text:
            return entry.snippet
        doc = self.retriever.document(entry.doc_id)  # a lookup by id, not a search
        return clip(doc.text or doc.title, self.config.review_max_chars)

    def _card_facts(self, entry: MemoryEntry) -> list[str]:
        facts = [f"seen t{entry.first_turn}"]
        pool = self.state.pool.get(entry.doc_id)
        if pool is not None and pool.source in SEARCH_TOOLS:
            facts.append(f'via "{clip(pool.query, 50)}"')
        item = self.state.curated.get(entry.doc_id)
        facts.append(f"curated {item.importance}" if item else "not curated")
        if entry.read:
            facts.append("read in full")
        return facts

    # -- curation and verification ---------------------------------------------------------

    def curate(self, arguments: dict[str, Any]) -> str:
        add_ids = _unique(arguments.get("add_ids", []))
        remove_ids = _unique(arguments.get("remove_ids", []))
        importance = {k.strip(): v for k, v in arguments.get("importance", {}).items()}
        if not (add_ids or remove_ids or importance):
            raise ToolFailure("nothing to do: give add_ids, remove_ids or importance")
        both = [d for d in add_ids if d in remove_ids]
        if both:
            raise ToolFailure(f"ids both added and removed: {', '.join(both)}")
        mentioned = [*add_ids, *remove_ids, *importance]
        self._require_shown(_unique(mentioned))
        additions: list[tuple[str, str | None]] = [(d, importance.get(d)) for d in add_ids]
        # An importance entry for a doc not in add_ids retags it, or adds it if uncurated.
        additions += [(d, tag) for d, tag in importance.items() if d not in add_ids]
        outcome = apply_curation(
            self.state,
            add=additions,
            remove=remove_ids,
            capacity=self.config.curated_capacity,
            tags_enabled=self.ablation.importance_tags,
        )
        text = outcome.summary(self.state, self.config.curated_capacity)
        not_curated = [d for d in remove_ids if d not in outcome.removed]
        if not_curated:
            text += f"; not curated, nothing removed: {', '.join(not_curated)}"
        if importance and not self.ablation.importance_tags:
            text += "; importance tags are disabled, every doc is fair"
        return text

    def verify(self, arguments: dict[str, Any]) -> str:
        claim = " ".join(arguments["claim"].split())
        ids = _unique(arguments["doc_ids"])
        self._require_shown(ids)
        lines = [f'claim "{clip(claim, 160)}":']
        # Every verdict first, then the records: a verifier that fails part-way (its server
        # went down) leaves no verification of this call in the state.
        records = []
        for doc_id in ids:
            doc = self.retriever.document(doc_id)
            # The lexical verifier (not a subclass redefining verify) takes the stored view.
            verifier = self.verifier
            if isinstance(verifier, LexicalVerifier) and (
                type(verifier).verify is LexicalVerifier.verify
            ):
                verdict = verifier.verify(claim, doc, self.analysis(doc).sentence_view())
            else:
                verdict = self.verifier.verify(claim, doc)
            if verdict.verdict not in VERDICTS:
                raise ValueError(f"verifier returned unknown verdict {verdict.verdict!r}")
            record = VerificationRecord(
                self.state.turn,
                claim,
                doc_id,
                verdict.verdict,
                round(float(verdict.score), 4),
                [str(e) for e in verdict.evidence],
            )
            records.append(record)
            evidence = " | ".join(f'"{e}"' for e in record.evidence) or "no matching sentence"
            lines.append(f"- {doc_id}: {record.verdict} ({record.score:.2f}) — {evidence}")
        self.state.verifications.extend(records)
        return "\n".join(lines)

    def end_search(self, arguments: dict[str, Any]) -> str:
        state = self.state
        state.final_reasoning = str(arguments.get("reasoning", ""))[:_FINAL_REASONING_CHARS]
        state.done = True
        state.termination_reason = "end_search"
        return f"search ended with {len(state.curated)} curated docs"

    # -- bookkeeping -----------------------------------------------------------------------

    def _require_shown(self, ids: list[str]) -> None:
        unseen = [d for d in ids if d not in self.state.shown]
        if unseen:
            raise ToolFailure(_not_shown_message(unseen, self.state))

    def _register(
        self,
        doc: Document,
        view: str,
        *,
        score: float,
        query: str,
        source: str,
        read: bool = False,
        analysis: DocAnalysis | None = None,
    ) -> None:
        """Record a document whose content was just shown: P, D, G, dedup index, T."""
        state, doc_id = self.state, doc.doc_id
        entry = state.pool.get(doc_id)
        if entry is None:
            state.pool[doc_id] = PoolEntry(
                doc_id, doc.title, float(score), state.turn, query, source
            )
        elif score > entry.score:
            entry.score = float(score)
        memory = state.memory.get(doc_id)
        if memory is None:
            snippet = clip(view, self.config.memory_snippet_chars)
            state.memory[doc_id] = MemoryEntry(doc_id, doc.title, snippet, state.turn, read)
            if self.ablation.evidence_graph or self.ablation.dedup:
                analysis = analysis or self.analysis(doc)
                if self.ablation.evidence_graph:
                    state.graph.add_document(doc, state.turn, analysis.entities())
                if self.ablation.dedup:
                    self.dedup.add_fingerprint(doc_id, analysis.fingerprint())
        elif read:
            memory.read = True
        self._mark_shown(doc_id)

    def _mark_shown(self, doc_id: str) -> None:
        if doc_id not in self.state.shown:
            self.state.shown[doc_id] = self.state.turn
            self.new_shown.append(doc_id)


def _search_text(query: str, lines: list[str], hidden: list[tuple[str, str]]) -> str:
    header = f'search "{clip(query, 120)}": {len(lines)} new results'
    if not lines and not hidden:
        header += " (documents returned earlier in this episode are excluded)"
    parts = [header, *lines]
    if hidden:
        parts.append("near-duplicates hidden: " + ", ".join(f"{d}≈{k}" for d, k in hidden))
    return "\n".join(parts)


def _not_shown_message(ids: list[str], state: HarnessState) -> str:
    """Names the ids never shown, and says which were hidden as near-duplicates of what."""
    hidden = [d for d in ids if d in state.suppressed]
    never = [d for d in ids if d not in state.suppressed]
    parts = []
    if never:
        parts.append(f"doc ids not shown in this episode: {', '.join(never)}")
    if hidden:
        pairs = ", ".join(f"{d} (near-duplicate of {state.suppressed[d]})" for d in hidden)
        parts.append(
            f"hidden as near-duplicates, their text was not shown: {pairs}; use the kept "
            "doc, or read_document the hidden one first"
        )
    return "; ".join(parts)


def _unique(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(i.strip() for i in ids))
