"""The batch launch form: a single choice comes chosen, ?benchmark= pre-selects one, and a
deterministic policy with several samples per query is warned about."""

from __future__ import annotations

import json
import re

import pytest

from harness_app.models import PolicyConfig, PolicyKind

pytestmark = pytest.mark.django_db


def _selected(page: str, field: str) -> list[str]:
    select = re.search(rf'<select name="{field}".*?</select>', page, re.S).group(0)
    return re.findall(r'<option value="(\d*)"[^>]*selected', select)


def _warning(page: str) -> str:
    return re.search(r'<p id="samples-warning"[^>]*>', page).group(0)


def test_a_single_benchmark_and_policy_come_chosen(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    page = researcher_client.get("/batches/new/").content.decode()
    assert _selected(page, "benchmark") == [str(demo_benchmark.pk)]
    assert _selected(page, "policy") == [str(baseline_policy.pk)]
    assert ">---------<" not in page


def test_with_several_policies_none_is_guessed_and_the_link_picks_the_benchmark(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    PolicyConfig.objects.create(name="llm", kind=PolicyKind.OPENAI, sampling={"temperature": 0.7})
    page = researcher_client.get("/batches/new/").content.decode()
    assert _selected(page, "policy") == [""] and ">---------<" in page  # the empty one
    page = researcher_client.get("/batches/new/", {"benchmark": demo_benchmark.pk}).content.decode()
    assert _selected(page, "benchmark") == [str(demo_benchmark.pk)]


def test_the_deterministic_policies_are_warned_about(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    greedy = PolicyConfig.objects.create(
        name="greedy", kind=PolicyKind.OPENAI, sampling={"temperature": 0}
    )
    sampled = PolicyConfig.objects.create(name="sampled", kind=PolicyKind.OPENAI)
    assert baseline_policy.is_deterministic and greedy.is_deterministic
    assert not sampled.is_deterministic
    page = researcher_client.get("/batches/new/").content.decode()
    ids = re.search(r'id="deterministic-policies" type="application/json">(.*?)<', page)
    assert sorted(json.loads(ids.group(1))) == sorted([baseline_policy.pk, greedy.pk])
    assert "hidden" in _warning(page)  # no policy chosen yet
    page = researcher_client.get("/batches/new/", {"policy": greedy.pk}).content.decode()
    assert "hidden" in _warning(page)  # its default is 1 sample per query
    form = {"policy": greedy.pk, "samples_per_query": "4"}  # no benchmark: drawn again
    page = researcher_client.post("/batches/new/", form).content.decode()
    assert "hidden" not in _warning(page)
    assert "more than one sample per query only repeats the work" in page
    page = researcher_client.get("/batches/new/", {"policy": sampled.pk}).content.decode()
    assert "hidden" in _warning(page)
