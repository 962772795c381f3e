"""The episode viewer: per-turn WORKINGMEMORY, typed diffs, graph, recall, tokens, documents."""

from __future__ import annotations

import json
import re

import pytest

from harness_app.models import Document
from trajectories.models import Turn
from trajectories.selectors.episode import episode_view, highlight
from trajectories.selectors.graph import graph_growth
from trajectories.selectors.tokens import token_strips
from trajectories.selectors.turns import Gold, turn_states
from trajectories.services.rollouts import batch_cancel, batch_create

pytestmark = pytest.mark.django_db

LOGIN_QUERIES = 3  # session, user, the user's groups


def _json_script(page: str, element_id: str) -> dict:
    match = re.search(
        rf'<script id="{element_id}" type="application/json">(.*?)</script>', page, re.S
    )
    assert match, f"no json_script {element_id}"
    return json.loads(match.group(1))


def test_viewer_shows_every_turn_with_its_curated_set_and_typed_diff(
    researcher_client, episode
) -> None:
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    states = turn_states(episode=episode)

    assert episode.query.text in page
    for index, state in enumerate(states):
        assert f'id="turn-{index}"' in page and f'href="#turn-{index}"' in page
        when = f"after turn {index}" if index else "at the start"  # turn 0 is the start
        assert f"{len(state['curated'])}/30 {when}" in page
    log = states[-1]["curation_log"]
    kinds = {e["kind"] for e in log}
    assert "added" in kinds and "removed" in kinds and "retagged" in kinds  # the baseline's turn 3
    retag = next(e for e in log if e["kind"] == "retagged")
    assert f"was {retag['detail']}" in page


def test_per_turn_parts_equal_the_rebuilt_states(ran_batch, batch_of) -> None:
    # Long enough for snapshots and deltas: SNAPSHOT_EVERY is 10 turns.
    long = batch_of(query_limit=1, ablate=["auto_seed"], max_turns=30).episodes.get()
    for episode in [*ran_batch.episodes.all(), long]:
        view = episode_view(episode=episode)
        states = turn_states(episode=episode)
        assert len(view.turns) == len(states)
        for turn, state in zip(view.turns, states, strict=True):
            assert {r.doc_id: (r.tag, r.added_turn) for r in turn.curated} == {
                d: (c["importance"], c["added_turn"]) for d, c in state["curated"].items()
            }
            assert (turn.tokens_used, turn.wm_tokens) == (state["tokens_used"], state["wm_tokens"])
            assert turn.turns_used == state["turns_used"]
            assert turn.pool_size == len(state["pool"])
            log = [e for e in state["curation_log"] if e["turn"] == turn.index]
            assert [(c.kind, c.doc_id) for c in turn.changes] == [
                (e["kind"], e["doc_id"]) for e in log
            ]


def test_typed_diff_of_a_turn_matches_the_curation_log(episode) -> None:
    view = episode_view(episode=episode)
    states = turn_states(episode=episode)
    for turn, before, after in zip(view.turns[1:], states, states[1:], strict=False):
        added = {c.doc_id for c in turn.changes if c.kind == "added"}
        gone = {c.doc_id for c in turn.changes if c.kind in ("removed", "evicted")}
        assert added - gone == set(after["curated"]) - set(before["curated"])
        assert gone - added == set(before["curated"]) - set(after["curated"])
        assert [r.doc_id for r in turn.curated if r.change == "added"] == sorted(
            added & set(after["curated"]),
            key=[r.doc_id for r in turn.curated].index,
        )


def test_gold_documents_are_marked_in_pool_and_timeline(researcher_client, episode) -> None:
    view = episode_view(episode=episode)
    gold = set(view.gold.relevant)
    assert gold and {t.doc_id for t in view.timelines} == gold
    for row in view.pool:
        assert (row.grade or 0) > 0 if row.doc_id in gold else not row.grade
    seen = {t.doc_id: t.seen_turn for t in view.timelines}
    states = turn_states(episode=episode)
    for doc_id, turn in seen.items():
        assert turn == states[-1]["shown"].get(doc_id)
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert page.count('class="gold"') >= len(gold)


def test_recall_per_turn_comes_from_the_turn_rows(researcher_client, episode) -> None:
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    recall = _json_script(page, "recall-data")
    rows = list(Turn.objects.filter(episode=episode).order_by("index"))
    assert recall["turns"] == [t.index for t in rows]
    assert recall["curated"] == [t.curated_recall for t in rows]
    assert recall["trajectory"] == [t.trajectory_recall for t in rows]
    assert {e["kind"] for e in recall["gold_events"]} >= {"seen", "added"}


def test_graph_grows_turn_by_turn_and_reaches_gold(researcher_client, episode) -> None:
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    graph = _json_script(page, "graph-data")
    growth = graph["growth"]
    assert [g["turn"] for g in growth] == list(range(len(growth)))
    docs = [g["docs"] for g in growth]
    assert docs == sorted(docs) and docs[0] == 0 and docs[-1] > 0
    assert growth[-1]["bridges"] > 0 and growth[-1]["gold_reached"] > 0
    nodes = graph["nodes"]
    for source, target, turn in graph["edges"]:
        assert nodes[source]["type"] == "doc" and nodes[target]["type"] == "entity"
        assert turn >= max(nodes[source]["turn"], nodes[target]["turn"])


def test_graph_growth_counts_components_and_linked_gold() -> None:
    graph = {
        "docs": {
            "a": {"title": "A", "turn": 1, "entity_keys": ["x"]},
            "b": {"title": "B", "turn": 1, "entity_keys": []},
            "c": {"title": "C", "turn": 2, "entity_keys": ["x"]},
        },
        "entities": {
            "x": {"key": "x", "label": "X", "kind": "name", "doc_ids": ["a", "c"], "first_turn": 1}
        },
        "bridges": ["x"],
    }
    gold = Gold(grades={"a": 2, "c": 1, "b": 0}, titles={})
    growth = graph_growth(graph, gold, last_turn=3)
    assert [(g["docs"], g["bridges"], g["components"], g["largest"]) for g in growth] == [
        (0, 0, 0, 0),
        (2, 0, 2, 1),
        (3, 1, 2, 2),
        (3, 1, 2, 2),
    ]
    assert [(g["gold_reached"], g["gold_linked"]) for g in growth] == [
        (0, 0),
        (1, 0),
        (2, 2),
        (2, 2),
    ]


def _as_of(graph, turn: int) -> tuple[list[str], dict[str, list[str]]]:
    """An EvidenceGraph's documents added by `turn` and its bridges among them (entity key
    -> doc ids), read off the graph's own records."""
    docs = [doc_id for doc_id, doc in graph.docs.items() if doc.turn <= turn]
    present = set(docs)
    bridges = {}
    for key in graph.bridges:
        ids = [d for d in graph.entities[key].doc_ids if d in present]
        if len(ids) > 1:
            bridges[key] = ids
    return docs, bridges


def _components(docs: list[str], bridges: dict[str, list[str]]) -> int:
    """Connected groups of documents linked through bridges, by plain search."""
    neighbours: dict[str, set[str]] = {d: set() for d in docs}
    for ids in bridges.values():
        for doc_id in ids:
            neighbours[doc_id].update(ids)
    seen: set[str] = set()
    count = 0
    for node in docs:
        if node in seen:
            continue
        count += 1
        stack = [node]
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(neighbours[current] - seen)
    return count


def test_graph_growth_agrees_with_the_harness_graph_turn_by_turn(episode) -> None:
    from harness_app.harness.graph import EvidenceGraph

    final = turn_states(episode=episode)[-1]
    graph = EvidenceGraph.from_json(final["graph"])
    view = episode_view(episode=episode)
    for row in view.graph["growth"]:
        docs, bridges = _as_of(graph, row["turn"])
        assert (row["docs"], row["bridges"]) == (len(docs), len(bridges))
        assert row["components"] == _components(docs, bridges)


def test_viewer_costs_the_same_queries_for_any_episode(
    researcher_client, ran_batch, new_model_call, django_assert_num_queries
) -> None:
    # episode, qrels, turns with their per-turn parts, the final state (latest snapshot,
    # then rows), model calls, verifier calls, the query's other runs, and the SFT exports
    # holding it (provenance, one query added by the annotator pages), its judgements with their
    # annotators (the Annotations card, one query), and its neighbours in the list it came
    # from: the previous, the next, its position and the count
    for each in ran_batch.episodes.all():
        new_model_call(each, turn_index=1)
        with django_assert_num_queries(LOGIN_QUERIES + 13):
            response = researcher_client.get(f"/episodes/{each.pk}/")
        assert response.status_code == 200


def test_compare_candidates_are_other_runs_of_the_query(researcher_client, ran_batch) -> None:
    first, second = ran_batch.episodes.filter(sample_index__in=[0, 1]).order_by("pk")[:2]
    assert first.query_id == second.query_id
    page = researcher_client.get(f"/episodes/{first.pk}/").content.decode()
    assert f'<option value="{second.pk}">' in page


def test_token_strip_colours_sampled_tokens_and_masks_context(
    researcher_client, episode, new_model_call
) -> None:
    new_model_call(
        episode, turn_index=1, prompt=[1, 2, 3], completion=[10, 11], logprobs=[-0.05, -5.0]
    )
    # The second call extends the first: its new prompt tokens are context (mask 0).
    new_model_call(
        episode,
        turn_index=2,
        prompt=[1, 2, 3, 10, 11, 20, 21],
        completion=[30],
        logprobs=[-0.3],
    )
    strips = token_strips(episode=episode, turn_index=2)
    assert len(strips) == 1
    strip = strips[0]
    assert strip.chain == 0 and strip.break_reason == ""
    assert [t.token_id for t in strip.masked_tail] == [20, 21]
    assert all(not t.trained for t in strip.masked_tail)
    assert [(t.token_id, t.trained, t.bucket) for t in strip.sampled] == [(30, True, 1)]
    first = token_strips(episode=episode, turn_index=1)[0]
    assert first.break_reason == "first_call"
    assert [t.bucket for t in first.sampled] == [0, 4]

    response = researcher_client.get(
        f"/episodes/{episode.pk}/turns/2/tokens/", headers={"HX-Request": "true"}
    )
    fragment = response.content.decode()
    assert "<html" not in fragment and 'class="tok lp1"' in fragment
    assert 'class="tok masked"' in fragment and "loss mask 0" in fragment


def test_token_fragment_costs_two_queries(
    researcher_client, episode, new_model_call, django_assert_num_queries
) -> None:
    for turn in range(1, 4):
        new_model_call(episode, turn_index=turn)
    with django_assert_num_queries(LOGIN_QUERIES + 2):  # the episode, its calls
        researcher_client.get(
            f"/episodes/{episode.pk}/turns/2/tokens/", headers={"HX-Request": "1"}
        )


def test_document_viewer_shows_grade_history_and_question_terms(researcher_client, episode) -> None:
    view = episode_view(episode=episode)
    gold_doc = view.gold.relevant[0]
    response = researcher_client.get(
        f"/episodes/{episode.pk}/document/", {"doc": gold_doc}, headers={"HX-Request": "true"}
    )
    fragment = response.content.decode()
    grade = view.gold.grades[gold_doc]
    assert f"grade {grade}" in fragment
    assert "first shown in" in fragment and "<mark>" in fragment
    whole = researcher_client.get(f"/episodes/{episode.pk}/document/", {"doc": gold_doc})
    assert "<html" in whole.content.decode()
    missing = researcher_client.get(f"/episodes/{episode.pk}/document/", {"doc": "nope"})
    assert missing.status_code == 404


def test_highlight_marks_stemmed_question_words_and_keeps_all_text() -> None:
    pieces = highlight("Rivers flow; the river's <b>mouth</b>.", {"river"})
    assert "".join(p for p, _ in pieces) == "Rivers flow; the river's <b>mouth</b>."
    assert [p for p, hit in pieces if hit] == ["Rivers", "river"]


def test_annotators_can_browse_episodes(annotator_client, episode) -> None:
    assert annotator_client.get(f"/episodes/{episode.pk}/").status_code == 200


def test_unknown_episode_is_404(researcher_client, db) -> None:
    assert researcher_client.get("/episodes/999999/").status_code == 404


def test_a_cancelled_episode_says_it_was_cancelled_and_when(
    researcher_client, demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=1)
    batch_cancel(batch=batch)
    episode = batch.episodes.get()
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert f"Cancelled on {episode.finished_at:%Y-%m-%d %H:%M} UTC with its batch" in page
    assert "No turns recorded yet" not in page


def test_the_reward_breakdown_folds_into_one_line(researcher_client, episode) -> None:
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    breakdown = page[page.index('<details class="reward-breakdown">') :]
    breakdown = breakdown[: breakdown.index("</details>")]
    assert f'Reward <b class="num">{episode.reward:.3f}</b>' in breakdown
    components = [name for name in episode.reward_components if name != "total"]
    assert components and all(f"<dt>{name}</dt>" in breakdown for name in components)


# --- untrusted text ------------------------------------------------------------------------


def _markup_without_json(page: str) -> str:
    # json_script escapes < > & inside the data; everything else is markup.
    return re.sub(r'<script id="[\w-]+" type="application/json">.*?</script>', "", page, flags=re.S)


def test_hostile_documents_replies_and_observations_are_escaped(
    researcher_client, hostile_episode, payloads
) -> None:
    episode = hostile_episode
    SCRIPT, IMG, JS_URL = payloads.script, payloads.img, payloads.js_url
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    markup = _markup_without_json(page)
    for payload in payloads.all:
        assert payload not in page
    assert "&lt;script&gt;alert(&#x27;xss&#x27;)&lt;/script&gt;" in markup  # shown, as text
    assert "&lt;img src=x onerror=" in markup
    assert f"href='{JS_URL}'" not in page and f'href="{JS_URL}' not in page
    assert "alert" not in "".join(re.findall(r"<script[^>]*>(.*?)</script>", markup, flags=re.S))
    graph = _json_script(page, "graph-data")
    assert any(IMG in n["label"] for n in graph["nodes"])  # data intact, escaped in transit

    tokens = researcher_client.get(
        f"/episodes/{episode.pk}/turns/1/tokens/", headers={"HX-Request": "1"}
    ).content.decode()
    assert SCRIPT not in tokens and "&lt;script&gt;" in tokens
    doc = researcher_client.get(
        f"/episodes/{episode.pk}/document/", {"doc": "Vell_lamp"}, headers={"HX-Request": "1"}
    ).content.decode()
    assert SCRIPT not in doc and IMG not in doc and "&lt;script&gt;" in doc
    assert Document.objects.filter(text__contains=SCRIPT).exists()  # the payload is really there


def test_row_tags_escape_ids_titles_tags_and_queries(payloads) -> None:
    from trajectories.selectors.turns import CuratedRow, PoolRow
    from trajectories.templatetags.viewer import curated_items, pool_items

    hostile = f'x"><{payloads.script}'
    curated = curated_items(
        [CuratedRow(doc_id=hostile, tag=hostile, added_turn=1, grade=2, change="added")], "/d/"
    )
    pool = pool_items(
        [PoolRow(hostile, payloads.img, 1.0, 3, payloads.script, hostile, 0, True, False)], "/d/"
    )
    for markup in (curated, pool):
        assert "<script" not in markup and "<img" not in markup and 'x">' not in markup
    assert "?doc=x%22%3E%3C%3Cscript%3E" in curated and "&lt;script&gt;" in pool


def test_document_viewer_costs_a_fixed_number_of_queries(
    researcher_client, episode, django_assert_num_queries
) -> None:
    gold_doc = episode_view(episode=episode).gold.relevant[0]
    # the episode with its batch, the document, its grade, then the final state rebuilt
    # from the last snapshot and the deltas after it (three queries whatever the turns)
    with django_assert_num_queries(LOGIN_QUERIES + 6):
        response = researcher_client.get(
            f"/episodes/{episode.pk}/document/", {"doc": gold_doc}, headers={"HX-Request": "1"}
        )
    assert response.status_code == 200
