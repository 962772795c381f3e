"""WORKINGMEMORY rendering: sections, grouping by tag, frugality, no new ids."""

from __future__ import annotations

import re

from harness_app.harness.working_memory import doc_label
from tests.harness.fakes import DOCS, call, make_env

ENGINE_QUERY = {"query": "Analytical Engine Babbage program"}


def test_sections_appear_in_order_once_there_is_something_to_show():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY)])
    env.step([call("verify", {"claim": "Ada Lovelace wrote notes", "doc_ids": ["Ada_Lovelace"]})])
    wm = env.step(
        [call("curate", {"importance": {"Ada_Lovelace": "very_high", "Jacquard_loom": "low"}})]
    ).working_memory
    sections = [
        line.split()[0].rstrip(":")
        for line in wm.splitlines()[1:-1]
        if re.match(r"^[A-Z]{4,}", line)
    ]
    assert sections == ["QUESTION", "CURATED", "POOL", "SEARCHES", "BRIDGES", "VERIFIED", "BUDGET"]
    assert wm.startswith("<WORKINGMEMORY>\n") and wm.endswith("\n</WORKINGMEMORY>")


def test_curated_docs_are_grouped_by_tag_best_first_and_low_is_ids_only():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY)])
    wm = env.step(
        [call("curate", {"importance": {"Ada_Lovelace": "very_high", "Jacquard_loom": "low"}})]
    ).working_memory
    assert (
        wm.index("very_high:\n- Ada_Lovelace: Ada Lovelace was")
        < wm.index("fair:\n")
        < wm.index("low: Jacquard_loom")
    )
    assert "CURATED 8/30" in wm


def test_working_memory_only_names_ids_already_shown():
    env = make_env()
    env.step([call("search_corpus", ENGINE_QUERY)])
    wm = env.step([call("grep_corpus", {"pattern": "census"})]).working_memory
    known = {d.doc_id for d in DOCS}
    named = {token for token in re.findall(r"[A-Za-z_]+", wm) if token in known}
    assert named <= env.state.shown_ids


def test_titles_are_printed_only_when_they_add_information():
    assert doc_label("Meet_Corliss_Archer_TV_series", "Meet Corliss Archer (TV series)") == (
        "Meet_Corliss_Archer_TV_series"
    )
    assert doc_label("4983", "Microstructural development of white matter") == (
        '4983 "Microstructural development of white matter"'
    )


def test_snippets_are_short_so_thirty_curated_docs_stay_cheap():
    env = make_env(wm_snippet_chars=30)
    env.step([call("search_corpus", ENGINE_QUERY)])
    wm = env.step([call("curate", {"add_ids": ["Ada_Lovelace"]})]).working_memory
    curated_lines = [line for line in wm.splitlines() if line.startswith("- ")]
    assert curated_lines and all(len(line.split(": ", 1)[1]) <= 30 for line in curated_lines)
