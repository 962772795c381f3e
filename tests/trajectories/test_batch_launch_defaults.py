"""Samples per query on the batch launch form default to what the chosen policy can use:
1 for a deterministic policy (every sample would be the same episode), 4 otherwise."""

from __future__ import annotations

import re

import pytest

from harness_app.models import PolicyConfig, PolicyKind

pytestmark = pytest.mark.django_db


def _samples_input(page: str) -> str:
    return re.search(r'<input [^>]*name="samples_per_query"[^>]*>', page).group(0)


def _samples(page: str) -> str:
    return re.search(r'value="(\d+)"', _samples_input(page)).group(1)


def test_the_only_policy_being_the_baseline_one_sample_is_the_default(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    page = researcher_client.get("/batches/new/").content.decode()

    assert _samples(page) == "1"
    assert "hidden" in re.search(r'<p id="samples-warning"[^>]*>', page).group(0)


@pytest.mark.parametrize(
    ("kind", "sampling", "samples"),
    [
        (PolicyKind.OPENAI, {"temperature": 0}, "1"),
        (PolicyKind.OPENAI, {"temperature": 0.7}, "4"),
        (PolicyKind.OPENAI, {}, "4"),  # the client's default temperature is 1
    ],
)
def test_the_policy_the_link_chooses_sets_the_default(
    researcher_client, demo_benchmark, baseline_policy, kind, sampling, samples
) -> None:
    policy = PolicyConfig.objects.create(name="llm", kind=kind, sampling=sampling)

    page = researcher_client.get("/batches/new/", {"policy": policy.pk}).content.decode()

    assert _samples(page) == samples


def test_with_no_policy_chosen_the_page_script_gets_both_defaults(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    PolicyConfig.objects.create(name="llm", kind=PolicyKind.OPENAI)
    page = researcher_client.get("/batches/new/").content.decode()

    tag = _samples_input(page)
    assert _samples(page) == "4"
    assert 'data-deterministic-default="1"' in tag and 'data-sampled-default="4"' in tag
    assert "data-follows-policy" in tag


def test_a_submitted_value_is_kept_and_no_longer_follows_the_policy(
    researcher_client, demo_benchmark, baseline_policy
) -> None:
    form = {"policy": baseline_policy.pk, "samples_per_query": "3", "max_turns": "0"}
    page = researcher_client.post("/batches/new/", form).content.decode()

    assert _samples(page) == "3" and "data-follows-policy" not in _samples_input(page)
