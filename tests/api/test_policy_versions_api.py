"""Policy configs through the API: the server's /v1/models decides whether a model name is
accepted; an edit of a used config makes a new version; only an unused one is deleted."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from harness_app.models import PolicyConfig, PolicyKind
from tests.fakes.openai_server import FakeOpenAIServer
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def served() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model="smollm2") as fake:
        yield fake


def _body(served: FakeOpenAIServer) -> dict[str, object]:
    return {"name": "small", "kind": "openai", "base_url": served.base_url, "model": "smollm2"}


def test_a_served_model_is_accepted_without_warnings(researcher_api, served) -> None:
    response = researcher_api.post("/api/policies/", _body(served), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["version"], body["previous"], body["warnings"]) == (1, None, [])


def test_a_model_the_server_does_not_serve_is_refused(researcher_api, served) -> None:
    body = {**_body(served), "model": "Qwen3-0.6B"}
    response = researcher_api.post("/api/policies/", body, format="json")

    assert response.status_code == 400
    (error,) = response.json()["model"]
    assert "does not serve 'Qwen3-0.6B'; it serves: 'smollm2'" in error
    assert not PolicyConfig.objects.filter(name="small").exists()


def test_an_unreachable_server_is_a_warning_in_the_answer(researcher_api, served) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    body = {**_body(served), "base_url": f"http://127.0.0.1:{port}/v1"}
    response = researcher_api.post("/api/policies/", body, format="json")

    assert response.status_code == 201
    (warning,) = response.json()["warnings"]
    assert "Could not list the models" in warning and "saved without checking" in warning


def test_patch_changes_an_unused_config_in_place(researcher_api, served) -> None:
    created = researcher_api.post("/api/policies/", _body(served), format="json").json()

    response = researcher_api.patch(
        f"/api/policies/{created['id']}/", {"sampling": {"temperature": 0.3}}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert response.json()["id"] == created["id"]
    assert PolicyConfig.objects.get(pk=created["id"]).sampling == {"temperature": 0.3}


def test_patch_of_a_used_config_answers_its_new_version(
    researcher_api, served, demo_benchmark
) -> None:
    policy = PolicyConfig.objects.create(name="rules", kind=PolicyKind.BASELINE)
    batch_create(benchmark=demo_benchmark, policy=policy, query_limit=1)

    response = researcher_api.patch(
        f"/api/policies/{policy.pk}/", {"retriever": "hybrid"}, format="json"
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["version"], body["previous"]) == ("rules v2", 2, policy.pk)
    assert response["Location"] == f"/api/policies/{body['id']}/"
    policy.refresh_from_db()
    assert policy.retriever == "bm25"


def test_delete_removes_an_unused_config_and_refuses_a_used_one(
    researcher_api, demo_benchmark
) -> None:
    unused = PolicyConfig.objects.create(name="spare", kind=PolicyKind.BASELINE)
    used = PolicyConfig.objects.create(name="rules", kind=PolicyKind.BASELINE)
    batch_create(benchmark=demo_benchmark, policy=used, query_limit=1)

    assert researcher_api.delete(f"/api/policies/{unused.pk}/").status_code == 204
    refused = researcher_api.delete(f"/api/policies/{used.pk}/")

    assert refused.status_code == 409
    assert "cannot be deleted: it is used by 1 batch" in refused.json()["detail"]
    assert list(PolicyConfig.objects.filter(name__in=["spare", "rules"])) == [used]


def test_annotators_can_neither_change_nor_delete(annotator_api) -> None:
    policy = PolicyConfig.objects.create(name="rules", kind=PolicyKind.BASELINE)
    assert (
        annotator_api.patch(f"/api/policies/{policy.pk}/", {"retriever": "dense"}).status_code
        == 403
    )
    assert annotator_api.delete(f"/api/policies/{policy.pk}/").status_code == 403
    assert PolicyConfig.objects.get(pk=policy.pk).retriever == "bm25"
