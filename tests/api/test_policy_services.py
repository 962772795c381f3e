"""A policy config's harness services through the API: the verifier (lexical or an LLM
judge) and the reranker, checked like the policy's own server."""

from __future__ import annotations

import pytest

from harness_app.models import PolicyConfig
from harness_app.policy_hosts import PolicyHostError, service_base_url

pytestmark = pytest.mark.django_db


def test_a_new_policy_keeps_the_lexical_verifier_and_no_reranker(researcher_api):
    response = researcher_api.post(
        "/api/policies/", {"name": "plain", "kind": "baseline"}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["verifier"] == "lexical"
    assert body["verifier_model"] == body["reranker_model"] == ""


def test_an_llm_verifier_and_a_reranker_are_stored_and_listed(researcher_api):
    body = {
        "name": "judged",
        "kind": "baseline",
        "verifier": "llm",
        "verifier_base_url": "http://127.0.0.1:8011/v1",
        "verifier_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "reranker_model": "BAAI/bge-reranker-base",
    }
    assert researcher_api.post("/api/policies/", body, format="json").status_code == 201
    listed = researcher_api.get("/api/policies/").json()["results"]
    (row,) = [p for p in listed if p["name"] == "judged"]
    assert {k: row[k] for k in body} == {**body}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"verifier": "llm"}, "verifier_model", "the LLM verifier needs the model"),
        ({"verifier": "oracle"}, "verifier", '"oracle" is not a valid choice.'),
        (
            {"verifier_base_url": "http://169.254.169.254/v1"},
            "verifier_base_url",
            "POLICY_ALLOWED_HOSTS",
        ),
        (
            {"reranker_base_url": "http://internal-db.example:5432/v1", "reranker_model": "r"},
            "reranker_base_url",
            "POLICY_ALLOWED_HOSTS",
        ),
        (
            {"reranker_base_url": "http://127.0.0.1:8012/v1"},
            "reranker_model",
            "name the reranking model",
        ),
    ],
)
def test_bad_service_settings_are_refused_naming_the_field(researcher_api, body, field, words):
    response = researcher_api.post(
        "/api/policies/", {"name": "x", "kind": "baseline", **body}, format="json"
    )
    assert response.status_code == 400
    assert words in " ".join(response.json()[field])
    assert not PolicyConfig.objects.filter(name="x").exists()


def test_a_stored_service_url_no_longer_allowed_is_refused_at_use(settings):
    config = PolicyConfig.objects.create(
        name="old",
        kind="baseline",
        verifier="llm",
        verifier_model="m",
        verifier_base_url="http://10.0.0.7:8000/v1",
    )
    with pytest.raises(PolicyHostError, match=f"policy config {config.pk}, verifier_base_url"):
        service_base_url(config, "verifier_base_url")
    assert service_base_url(config, "reranker_base_url") == settings.VLLM_BASE_URL
