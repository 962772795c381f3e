"""Errors answer in the client's language: JSON under /api/, the site's styled pages
elsewhere; the 500 page renders without the database."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error


@pytest.mark.django_db
def test_an_oversized_api_body_is_a_json_400(researcher_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    response = researcher_api.post("/api/recordings/", {"name": "x" * 5000}, format="json")
    assert response.status_code == 400
    assert response["content-type"] == "application/json"
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]


@pytest.mark.django_db
def test_an_unknown_api_path_is_a_json_404(researcher_api):
    response = researcher_api.get("/api/no-such-thing/")
    assert response.status_code == 404
    assert response.json() == {"detail": "nothing at /api/no-such-thing/"}


@pytest.mark.django_db
def test_an_unknown_proxy_path_is_a_404_in_the_openai_shape(client):
    response = client.get("/proxy/hrk_x/v2/anything")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


@pytest.mark.django_db
def test_an_unknown_page_is_still_a_page(client, researcher):
    client.force_login(researcher)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["content-type"].startswith("text/html")


@pytest.mark.django_db
def test_an_unknown_address_gets_the_styled_404_page(researcher_client) -> None:
    response = researcher_client.get("/no-such-page/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in page and "/no-such-page/" in page
    assert 'class="topbar"' in page and 'href="/episodes/"' in page  # the site's own layout


@pytest.mark.django_db
def test_a_missing_episode_gets_the_styled_404_page(researcher_client) -> None:
    response = researcher_client.get("/episodes/999999/")
    assert response.status_code == 404 and "<h1>Not found</h1>" in response.content.decode()


def test_the_500_page_needs_no_database() -> None:
    # No django_db mark: pytest-django raises on any database access.
    response = server_error(RequestFactory().get("/"))
    page = response.content.decode()
    assert response.status_code == 500
    assert "<h1>Server error</h1>" in page and "css/base.css" in page
