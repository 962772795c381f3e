"""Errors answer in the client's language: JSON under /api/, pages elsewhere."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_an_oversized_api_body_is_a_json_400(researcher_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    response = researcher_api.post("/api/recordings/", {"name": "x" * 5000}, format="json")
    assert response.status_code == 400
    assert response["content-type"] == "application/json"
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]


def test_an_unknown_api_path_is_a_json_404(researcher_api):
    response = researcher_api.get("/api/no-such-thing/")
    assert response.status_code == 404
    assert response.json() == {"detail": "nothing at /api/no-such-thing/"}


def test_an_unknown_proxy_path_is_a_404_in_the_openai_shape(client):
    response = client.get("/proxy/hrk_x/v2/anything")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


def test_an_unknown_page_is_still_a_page(client, researcher):
    client.force_login(researcher)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["content-type"].startswith("text/html")
