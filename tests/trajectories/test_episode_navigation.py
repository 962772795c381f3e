"""Getting around the episodes: the viewer's previous/next within the list's filter and sort,
the way back, sortable headers, the selection's actions, the list and trajectory downloads,
and token text in the token strips."""

from __future__ import annotations

import csv
import io
import json
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.conftest import smollm2_model_dir
from trajectories.episode_filters import (
    EpisodeFilterError,
    episode_filters_clean,
    episodes_matching,
)
from trajectories.models import Episode, EpisodeStatus, RolloutBatch
from trajectories.selectors.episode_list import episode_list_queryset, episode_neighbours
from trajectories.selectors.tokens import token_decoder, token_strips

pytestmark = pytest.mark.django_db


def _spread(batch: RolloutBatch, count: int) -> None:
    """Extra episodes with tied and missing rewards, so ties and unfinished rows are walked."""
    group = batch.groups.order_by("pk").first()
    Episode.objects.bulk_create(
        Episode(
            group=group,
            batch=batch,
            query_id=group.query_id,
            sample_index=100 + i,
            status=EpisodeStatus.RUNNING if i % 7 == 0 else EpisodeStatus.COMPLETED,
            reward=None if i % 7 == 0 else (i % 4) / 4,
            curated_recall=None if i % 7 == 0 else (i % 3) / 3,
            turns=i % 5,
        )
        for i in range(count)
    )


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"sort": "reward_desc"},
        {"sort": "reward_asc", "status": "completed"},
        {"sort": "turns_asc"},
        {"sort": "oldest"},
        {"sort": "curated_recall_desc", "batch": "{batch}"},
    ],
)
def test_previous_and_next_walk_the_list_in_its_order(ran_batch, filters) -> None:
    _spread(ran_batch, 30)
    filters = {k: (ran_batch.pk if v == "{batch}" else v) for k, v in filters.items()}
    order = list(episode_list_queryset(filters=filters).values_list("pk", flat=True))
    for position, pk in enumerate(order):
        around = episode_neighbours(filters=filters, episode=Episode.objects.get(pk=pk))
        assert around.previous == (order[position - 1] if position else None)
        assert around.next == (order[position + 1] if position + 1 < len(order) else None)
        assert (around.position, around.count) == (position + 1, len(order))


def test_an_episode_outside_the_filter_has_no_position(ran_batch) -> None:
    _spread(ran_batch, 10)
    running = Episode.objects.filter(status=EpisodeStatus.RUNNING).first()
    around = episode_neighbours(filters={"status": "completed"}, episode=running)
    assert around.position == 0 and around.count > 0


def test_viewer_links_its_neighbours_and_the_filtered_list(researcher_client, ran_batch) -> None:
    _spread(ran_batch, 120)
    list_query = urlencode({"status": "completed", "sort": "reward_desc"})
    order = list(
        episode_list_queryset(filters={"status": "completed", "sort": "reward_desc"}).values_list(
            "pk", flat=True
        )
    )
    at = 60  # on the list's second page
    page = researcher_client.get(f"/episodes/{order[at]}/", {"from": list_query}).content.decode()
    suffix = "?" + urlencode({"from": list_query}).replace("&", "&amp;")
    assert f'rel="prev" id="episode-prev" href="/episodes/{order[at - 1]}/{suffix}"' in page
    assert f'rel="next" id="episode-next" href="/episodes/{order[at + 1]}/{suffix}"' in page
    assert f"{at + 1} of {len(order)} in this filter" in page
    back = re.search(r'href="([^"]+)" id="back-to-list">Episodes \(filtered\)', page)
    assert back is not None
    params = parse_qs(urlsplit(back.group(1).replace("&amp;", "&")).query)
    assert params == {"status": ["completed"], "sort": ["reward_desc"], "page": ["2"]}
    assert f'href="/episodes/{order[at]}/trajectory.json"' in page

    # The list's own rows carry their filter into the viewer.
    listing = researcher_client.get(f"/episodes/?{list_query}").content.decode()
    assert f'href="/episodes/{order[0]}/?{urlencode({"from": list_query})}">#' in listing


def test_viewer_without_a_list_walks_every_episode_newest_first(
    researcher_client, ran_batch
) -> None:
    first, second = ran_batch.episodes.order_by("-pk")[:2]
    page = researcher_client.get(f"/episodes/{second.pk}/").content.decode()
    assert f'rel="prev" id="episode-prev" href="/episodes/{first.pk}/"' in page
    assert re.search(r'href="/episodes/" id="back-to-list">Episodes<', page)


def test_headers_sort_the_list_and_turn_round(researcher_client, ran_batch) -> None:
    _spread(ran_batch, 10)
    page = researcher_client.get("/episodes/", {"sort": "reward_desc", "page": "1"}).content
    text = page.decode()
    # The sorted column says so, and its header turns the order round (back to page 1).
    assert re.search(r'aria-sort="descending"><a class="sort-link" href="\?sort=reward_asc"', text)
    assert re.search(r'aria-sort="none"><a class="sort-link" href="\?sort=turns_desc"', text)


def test_unknown_sort_is_reported_and_ignored(researcher_client, ran_batch) -> None:
    response = researcher_client.get("/episodes/", {"sort": "password"})
    assert response.status_code == 200
    text = response.content.decode()
    assert "sort:" in text and "(ignored)" in text
    newest = ran_batch.episodes.order_by("-pk").first()
    assert text.index(f"/episodes/{newest.pk}/") < text.index(
        f"/episodes/{ran_batch.episodes.order_by('pk').first().pk}/"
    )
    download = researcher_client.get("/episodes/download.csv", {"sort": "pk; drop table"})
    assert download.status_code == 200


def test_downloads_hold_every_filtered_row_not_just_the_page(researcher_client, ran_batch) -> None:
    _spread(ran_batch, 130)
    expected = list(
        episode_list_queryset(filters={"status": "completed", "sort": "reward_asc"}).values_list(
            "pk", flat=True
        )
    )
    assert len(expected) > 100  # more than two pages
    params = {"status": "completed", "sort": "reward_asc"}
    response = researcher_client.get("/episodes/download.csv", params)
    assert response["Content-Disposition"] == 'attachment; filename="episodes.csv"'
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [int(r["id"]) for r in rows] == expected
    assert {r["status"] for r in rows} == {"completed"}

    response = researcher_client.get("/episodes/download.json", params)
    data = json.loads(b"".join(response.streaming_content))
    assert [r["id"] for r in data] == expected
    assert data[0]["question"] and "reward" in data[0]
    assert researcher_client.get("/episodes/download.xml").status_code == 404


def test_trajectory_download_is_the_whole_episode(researcher_client, episode, new_model_call):
    new_model_call(episode, turn_index=1, prompt=[5, 6], completion=[7])
    response = researcher_client.get(f"/episodes/{episode.pk}/trajectory.json")
    assert response["Content-Disposition"] == (
        f'attachment; filename="episode-{episode.pk}-trajectory.json"'
    )
    data = json.loads(response.content)
    assert data["id"] == episode.pk and data["reward_components"]
    assert len(data["turn_rows"]) == episode.turn_rows.count() > 1
    assert "curated" in data["turn_rows"][-1]["state"]
    assert data["model_calls"][0]["prompt_token_ids"] == [5, 6]
    # The same document as the API's.
    api = researcher_client.get(f"/api/episodes/{episode.pk}/").json()
    assert api == data


def test_selection_actions_lead_to_compare_labelling_and_export(
    researcher_client, ran_batch
) -> None:
    a, b, c = ran_batch.episodes.order_by("pk").values_list("pk", flat=True)[:3]
    go = researcher_client.get
    response = go("/episodes/selection/", {"ids": [a, b], "action": "compare"})
    assert response.url == f"/compare/?a={a}&b={b}"
    response = go("/episodes/selection/", {"ids": [a], "action": "compare", "from": "sort=oldest"})
    assert response.url == "/episodes/?sort=oldest"
    response = go("/episodes/selection/", {"ids": [a, b, c], "action": "label"})
    assert response.url == f"/annotate/bulk/?ids={a}%2C{b}%2C{c}"
    response = go("/episodes/selection/", {"ids": [a, c], "action": "export"})
    assert response.url == f"/exports/new/?episodes={a}%2C{c}"

    # The bulk page previews exactly the chosen episodes.
    preview = go("/annotate/bulk/", {"ids": f"{a},{c}", "label": "approve", "preview": "1"})
    assert '<b id="preview-count">2</b>' in preview.content.decode()


def test_ids_filter_chooses_episodes_and_refuses_an_empty_list(ran_batch) -> None:
    a, b = ran_batch.episodes.order_by("pk").values_list("pk", flat=True)[:2]
    chosen = episodes_matching(filters=episode_filters_clean({"ids": f"{b}, {a}"}))
    assert sorted(chosen.values_list("pk", flat=True)) == [a, b]
    with pytest.raises(EpisodeFilterError, match="no episode id"):
        episode_filters_clean({"ids": ","})


# --- token text -------------------------------------------------------------------------------


def test_calls_are_numbered_alike_in_headings_and_strips(
    researcher_client, episode, new_model_call
) -> None:
    new_model_call(episode, turn_index=1, prompt=[1, 2], completion=[3])
    second = new_model_call(episode, turn_index=2, prompt=[1, 2, 3, 4], completion=[5])
    page = researcher_client.get(f"/episodes/{episode.pk}/").content.decode()
    assert f'<span title="model call id {second.pk}">call 2</span>' in page
    strip = researcher_client.get(f"/episodes/{episode.pk}/turns/2/tokens/").content.decode()
    assert f'<span title="model call id {second.pk}">call 2</span>' in strip
    prompt = researcher_client.get(f"/episodes/{episode.pk}/turns/2/prompt/").content.decode()
    assert f'<span title="model call id {second.pk}">call 2</span>' in prompt


def test_without_a_tokenizer_ids_show_with_the_reason(
    researcher_client, episode, new_model_call, settings, tmp_path
) -> None:
    settings.RL_BASE_MODEL_DIR = str(tmp_path)
    new_model_call(episode, turn_index=1, prompt=[41, 42], completion=[43])
    fragment = researcher_client.get(f"/episodes/{episode.pk}/turns/1/tokens/").content.decode()
    assert '<span class="tok masked" title="id 42 · loss mask 0 (context)">42</span>' in fragment
    assert f"no tokenizer at {tmp_path}" in fragment


def test_masked_context_is_decoded_by_the_local_tokenizer(
    researcher_client, episode, new_model_call, settings
) -> None:
    folder = smollm2_model_dir()
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"no SmolLM2 tokenizer at {folder}: run `make llm` (or set LLM_DIR)")
    pytest.importorskip("transformers", reason="decoding needs transformers (the 'train' extra)")
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(folder)).encode("The capital of France")
    settings.RL_BASE_MODEL_DIR = str(folder)
    new_model_call(episode, turn_index=1, prompt=ids, completion=[28])
    decoder = token_decoder()
    assert decoder.decode is not None
    strip = token_strips(episode=episode, turn_index=1, decoder=decoder)[0]
    assert "".join(t.text or "" for t in strip.masked_tail) == "The capital of France"
    assert strip.sampled[0].text == "t28"  # the server's own text is kept
    fragment = researcher_client.get(f"/episodes/{episode.pk}/turns/1/tokens/").content.decode()
    assert f'title="id {ids[1]} · loss mask 0 (context)"> capital</span>' in fragment
    assert "decoded with the tokenizer in" in fragment
