"""The deterministic baseline on a small two-hop corpus written for these tests.

The question names an opera; only the opera's article names its composer, and the
composer's article shares no word with the question. Plain BM25 therefore can never find
the answer document, while a policy that follows the bridge entity can.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_app.harness.ablation import MECHANISMS, Ablation
from harness_app.harness.config import HarnessConfig
from harness_app.harness.env import SearchHarness
from harness_app.harness.metrics import single_search_recall
from harness_app.harness.policies import PolicyError, make_policy
from harness_app.harness.policies.baseline import BaselinePolicy
from harness_app.harness.retrieval import BM25Index
from harness_app.harness.runner import run_episode
from harness_app.harness.types import Document, QuerySpec

ROOT = Path(__file__).resolve().parents[2]

CORPUS: tuple[Document, ...] = (
    Document(
        "Glass_Harbour_opera",
        "Glass Harbour (opera)",
        "Glass Harbour is an opera in three acts first staged in 1921. Its music was written "
        "by Miren Ostrova to a libretto about a lighthouse keeper. The premiere was poorly "
        "received, but a 1950 revival made it a repertory piece.",
    ),
    Document(
        "Miren_Ostrova",
        "Miren Ostrova",
        "Miren Ostrova (1880-1950) was a pianist and teacher from Calder Falls. She studied "
        "with private tutors and later led a conservatory for four decades.",
    ),
    Document(
        "Harbour_Town_Opera_House",
        "Harbour Town Opera House",
        "The Harbour Town Opera House is a theatre in a small harbour town. Many opera "
        "composers were born nearby, and the town hosts an opera festival every summer.",
    ),
    Document(
        "Glass_Composers_Guild",
        "Glass Composers Guild",
        "The Glass Composers Guild is a society of composers who write music for glass "
        "harmonica. Its founder was born in a harbour town known for opera.",
    ),
    Document(
        "Opera_in_harbour_towns",
        "Opera in harbour towns",
        "Opera in harbour towns describes touring opera companies that performed in harbour "
        "towns. Several composers born in such a town wrote a harbour opera.",
    ),
    Document(
        "Town_band_tradition",
        "Town band tradition",
        "The town band tradition gave many a composer a first stage. A composer born in a "
        "mill town often wrote marches before any opera.",
    ),
    Document(
        "Stained_glass",
        "Stained glass",
        "Stained glass is coloured glass used in windows. Opera houses in a harbour town "
        "sometimes commissioned glass panels showing a composer.",
    ),
    Document(
        "Harbour_pilot",
        "Harbour pilot",
        "A harbour pilot guides ships into a harbour. The pilot of the town harbour was born "
        "into a family of sailors, not composers.",
    ),
    Document(
        "Born_in_the_Harbour",
        "Born in the Harbour (film)",
        "Born in the Harbour is a film about a composer born in a harbour town who writes an "
        "opera about glass makers.",
    ),
    Document(
        "Composer_biographies",
        "Composer biographies",
        "Composer biographies list where each composer was born, the town they grew up in and "
        "the opera or symphony that made them famous.",
    ),
    Document(
        "Glassblowing",
        "Glassblowing",
        "Glassblowing shapes molten glass with air. A glass town near the harbour was famous "
        "for it, and one opera composer was born there.",
    ),
    Document(
        "Lighthouse_keeper",
        "Lighthouse keeper",
        "A lighthouse keeper tends the light of a lighthouse. Keepers lived in isolated "
        "places and kept logbooks of weather and passing ships.",
    ),
)

QUESTION = QuerySpec(
    "q-opera",
    "In which town was the composer of the opera Glass Harbour born?",
    answer="Calder Falls",
    qrels={"Miren_Ostrova": 2, "Glass_Harbour_opera": 1},
)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> BM25Index:
    return BM25Index.build(CORPUS, tmp_path_factory.mktemp("opera") / "index")


def play(index, ablation=None, **config):
    env = SearchHarness(index, config=HarnessConfig(**config), ablation=ablation)
    tools = [s["function"]["name"] for s in env.tool_schemas()]
    result = run_episode(env, BaselinePolicy(tools=tools), QUESTION)
    return env, result


def test_plain_bm25_cannot_reach_the_answer_document(index):
    # The premise of the other tests: the answer doc shares no term with the question.
    assert single_search_recall(index, QUESTION, 30).final_answer == 0.0


def test_baseline_follows_the_bridge_entity_to_the_answer(index):
    env, result = play(index)
    assert result.termination_reason == "end_search"
    assert {"Miren_Ostrova", "Glass_Harbour_opera"} <= set(result.curated_ids)
    assert result.metrics.final_answer_recall == 1.0
    k = result.metrics.curated_count
    assert result.metrics.curated_recall > single_search_recall(index, QUESTION, k).curated
    # The bridge is looked up by title: the grep shows the composer's article alone.
    greps = [s for s in env.state.searches if s.tool == "grep_corpus"]
    assert any(s.hit_ids == ["Miren_Ostrova"] for s in greps)
    assert result.metrics.shown_count < 12  # the question's 10 hits and the article


def test_without_grep_the_bridge_is_searched_for(index):
    env = SearchHarness(index)
    tools = [
        s["function"]["name"] for s in env.tool_schemas() if s["function"]["name"] != "grep_corpus"
    ]
    result = run_episode(env, BaselinePolicy(tools=tools), QUESTION)
    fan_out = [s for s in env.state.searches if s.tool == "fan_out_search"]
    assert any("Miren Ostrova" in s.query for s in fan_out)
    assert result.metrics.final_answer_recall == 1.0
    assert "grep_corpus" not in env.state.tool_counts


def test_baseline_uses_six_tools_without_format_errors(index):
    _, result = play(index)
    assert result.metrics.tool_diversity == 6  # full diversity credit in the reward
    assert result.metrics.format_errors == 0
    assert result.reward.diversity_shortfall == 0.0


def test_baseline_keeps_the_curated_set_small_and_tagged(index):
    env, result = play(index)
    assert result.metrics.curated_count == 5  # auto-seeded extras were removed
    tags = {item.importance for item in env.state.curated.values()}
    assert "very_high" in tags
    assert env.state.curated["Miren_Ostrova"].importance in ("very_high", "high")


def _trajectory(index) -> list[list[dict]]:
    _, result = play(index)
    return [turn.tool_calls for turn in result.turns]


def test_same_question_same_trajectory(index):
    assert _trajectory(index) == _trajectory(index)


def test_trajectory_does_not_depend_on_hash_seed(index, tmp_path):
    # Set iteration order changes with PYTHONHASHSEED; the plan must not.
    script = (
        "import json, sys\n"
        "from harness_app.harness.retrieval import BM25Index\n"
        "from tests.harness.test_baseline import _trajectory\n"
        f"print(json.dumps(_trajectory(BM25Index.load({str(index.directory)!r}))))\n"
    )
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] == json.loads(json.dumps(_trajectory(index)))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_single_ablation_runs_without_format_errors(index, mechanism):
    env, result = play(index, Ablation().without(mechanism))
    assert result.metrics.format_errors == 0
    assert result.termination_reason == "end_search"
    assert result.metrics.curated_count > 0
    offered = {s["function"]["name"] for s in env.tool_schemas()}
    assert set(env.state.tool_counts) <= offered


def test_tight_budget_still_ends_with_a_curated_set(index):
    # After turn 3 of 4 the marker warns at 75%: the baseline curates and ends itself.
    _, result = play(index, max_turns=4)
    assert result.termination_reason == "end_search"
    assert result.metrics.turns <= 4
    assert "Glass_Harbour_opera" in result.curated_ids


def test_question_with_no_matching_document_ends_cleanly(index):
    env = SearchHarness(index)
    odd = QuerySpec("q-none", "zyzzyva quokka?", qrels={"Miren_Ostrova": 2})
    result = run_episode(env, BaselinePolicy(), odd)
    assert [s.query for s in env.state.searches] == ["zyzzyva quokka?", "zyzzyva quokka"]
    assert result.termination_reason == "end_search"
    assert result.metrics.curated_count == 0
    assert result.reward.total == -0.2


def test_document_hidden_as_near_duplicate_is_read_back_and_ranked(tmp_path):
    # A mirror of the opera article that dedup hides behind the original: only reading it
    # gives the policy its title and text, after which it competes like any other doc.
    opera = CORPUS[0]
    mirror = Document("Glass_Harbour_mirror", "Glass Harbour (mirror)", opera.text + " Mirror.")
    index = BM25Index.build((*CORPUS, mirror), tmp_path / "index")
    # The mirror ranks 11th for the question, just past the default 10 hits.
    env, result = play(index, search_k=12)
    hidden = set(env.state.suppressed)
    assert hidden & {"Glass_Harbour_opera", "Glass_Harbour_mirror"}
    calls = [c for t in result.turns for c in t.tool_calls]
    read = [c["arguments"]["doc_id"] for c in calls if c["name"] == "read_document"]
    assert hidden <= set(read)
    assert hidden <= set(env.state.memory)
    assert result.metrics.format_errors == 0


def test_make_policy_knows_the_baseline_and_rejects_other_names():
    assert make_policy("baseline").name == "baseline"
    with pytest.raises(PolicyError, match=r"unknown policy 'gpt5'.*baseline"):
        make_policy("gpt5")
