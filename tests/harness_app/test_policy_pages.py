"""Policy pages: a researcher creates a policy without the API; bad input is named by field
in the API's own words; annotators are refused."""

from __future__ import annotations

import re
from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind

pytestmark = pytest.mark.django_db


def _form(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "qwen-t07",
        "kind": PolicyKind.OPENAI,
        "base_url": "http://127.0.0.1:8011/v1",
        "model": "Qwen/Qwen3-0.6B",
        "sampling": '{"temperature": 0.7, "max_tokens": 512}',
        "system_prompt_version": "v1",
        "tool_call_format": "openai_tools",
        "tool_parser": "hermes",
        "context_mode": "append",
        "context_limit": "",
        "retriever": "bm25",
        "verifier": "lexical",
        "verifier_base_url": "",
        "verifier_model": "",
        "reranker_base_url": "",
        "reranker_model": "",
    }
    return {**data, **overrides}


def test_researcher_creates_a_policy_and_sees_it_listed(researcher_client) -> None:
    response = researcher_client.post("/policies/new/", _form())

    policy = PolicyConfig.objects.get(name="qwen-t07")
    assert policy.sampling == {"temperature": 0.7, "max_tokens": 512}
    assert response.status_code == 302
    page = researcher_client.get(response.url).content.decode()
    assert "qwen-t07" in page and "temperature=0.7" in page
    assert f'href="/batches/new/?policy={policy.pk}"' in page


def test_the_form_shows_the_vllm_url_as_placeholder(researcher_client, settings) -> None:
    page = researcher_client.get("/policies/new/").content.decode()
    assert f'placeholder="{settings.VLLM_BASE_URL}"' in page
    for field in ("verifier_base_url", "reranker_base_url"):
        tag = re.search(rf'<input [^>]*name="{field}"[^>]*>', page)
        assert tag and f'placeholder="{settings.VLLM_BASE_URL}"' in tag.group(0)


def test_a_policy_with_the_llm_verifier_and_a_reranker_is_created_from_the_page(
    researcher_client,
) -> None:
    form = _form(
        verifier="llm",
        verifier_base_url="127.0.0.1:8011/v1",  # no scheme: http, as for base_url
        verifier_model="judge",
        reranker_model="bge-reranker",
    )
    assert researcher_client.post("/policies/new/", form).status_code == 302
    policy = PolicyConfig.objects.get(name="qwen-t07")
    assert (policy.verifier, policy.verifier_base_url, policy.verifier_model) == (
        "llm",
        "http://127.0.0.1:8011/v1",
        "judge",
    )
    assert (policy.reranker_base_url, policy.reranker_model) == ("", "bge-reranker")


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"sampling": '{"temperature": "hot"}'}, "sampling", "temperature must be a number"),
        ({"sampling": '{"warmth": 1}'}, "sampling", "unknown setting"),
        ({"base_url": "http://169.254.169.254/v1"}, "base_url", "169.254.169.254"),
        ({"model": ""}, "model", "an OpenAI-compatible policy needs one"),
        ({"system_prompt_version": "v99"}, "system_prompt_version", "unknown version"),
        ({"verifier": "llm"}, "verifier_model", "the LLM verifier needs the model"),
        (
            {"verifier_base_url": "http://169.254.169.254/v1"},
            "verifier_base_url",
            "169.254.169.254",
        ),
        (
            {"reranker_base_url": "http://127.0.0.1:8012/v1"},
            "reranker_model",
            "name the reranking model",
        ),
    ],
)
def test_bad_input_is_named_by_field(
    researcher_client, overrides: dict[str, str], field: str, words: str
) -> None:
    response = researcher_client.post("/policies/new/", _form(**overrides))

    assert response.status_code == 200
    assert not PolicyConfig.objects.filter(name="qwen-t07").exists()
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert words in " ".join(errors[field])


def test_annotators_are_refused(annotator_client) -> None:
    assert annotator_client.get("/policies/").status_code == 403
    assert annotator_client.post("/policies/new/", _form()).status_code == 403
    assert not PolicyConfig.objects.filter(name="qwen-t07").exists()
