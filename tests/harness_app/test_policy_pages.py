"""Policy pages: a researcher creates a policy without the API; bad input is named by field
in the API's own words; the server's /v1/models is asked whether it serves the model;
annotators are refused."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db

MODEL = "Qwen/Qwen3-0.6B"


@pytest.fixture
def served() -> Iterator[FakeOpenAIServer]:
    """The policy's server; the forms below point at it."""
    with FakeOpenAIServer(model=MODEL) as fake:
        yield fake


def _closed_port_url() -> str:
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _form(server: FakeOpenAIServer, **overrides: Any) -> dict[str, Any]:
    return factories.policy_form(
        **{
            "name": "qwen-t07",
            "kind": PolicyKind.OPENAI,
            "base_url": server.base_url,
            "model": MODEL,
            "sampling": '{"temperature": 0.7, "max_tokens": 512}',
            **overrides,
        }
    )


def test_researcher_creates_a_policy_and_sees_it_listed(researcher_client, served) -> None:
    response = researcher_client.post("/policies/new/", _form(served))

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
    researcher_client, served
) -> None:
    form = _form(
        served,
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
    researcher_client, served, overrides: dict[str, str], field: str, words: str
) -> None:
    response = researcher_client.post("/policies/new/", _form(served, **overrides))

    assert response.status_code == 200
    assert not PolicyConfig.objects.filter(name="qwen-t07").exists()
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert words in " ".join(errors[field])


def test_annotators_are_refused(annotator_client, served) -> None:
    assert annotator_client.get("/policies/").status_code == 403
    assert annotator_client.post("/policies/new/", _form(served)).status_code == 403
    assert not PolicyConfig.objects.filter(name="qwen-t07").exists()


def test_a_model_the_server_does_not_serve_is_refused_with_the_ones_it_serves(
    researcher_client, served
) -> None:
    served.models.add("smollm2")
    response = researcher_client.post("/policies/new/", _form(served, model="Qwen3-0.6B"))

    assert response.status_code == 200
    assert not PolicyConfig.objects.filter(name="qwen-t07").exists()
    (error,) = response.context["form"].errors["model"]
    assert f"{served.base_url}/models" in error
    assert "does not serve 'Qwen3-0.6B'" in error and "'Qwen/Qwen3-0.6B', 'smollm2'" in error
    assert [r["path"] for r in served.requests] == ["/v1/models"]


@pytest.mark.parametrize("down", ["closed port", "answers 500"])
def test_an_unreachable_server_is_said_and_the_policy_saved(
    researcher_client, served, down: str
) -> None:
    if down == "closed port":
        form = _form(served, base_url=_closed_port_url())
    else:
        served.refuse["models"] = 500
        form = _form(served)

    response = researcher_client.post("/policies/new/", form, follow=True)

    assert PolicyConfig.objects.filter(name="qwen-t07").exists()
    warning = response.context["messages"]
    text = " ".join(str(m) for m in warning)
    assert "Could not list the models" in text and "saved without checking" in text
    assert "Qwen/Qwen3-0.6B" in text


def test_the_baseline_asks_no_server(researcher_client, served) -> None:
    form = _form(served, name="rules", kind=PolicyKind.BASELINE, model="")
    assert researcher_client.post("/policies/new/", form).status_code == 302
    assert served.requests == []
