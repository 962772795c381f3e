"""Error pages are styled pages of the site, and the 500 page renders without the database."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error


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
