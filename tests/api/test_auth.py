"""Tokens, roles and throttling across the API."""

from __future__ import annotations

import pytest
from rest_framework.throttling import SimpleRateThrottle

from harness_app.roles import Role
from tests import factories

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    ("get", "/api/benchmarks/"),
    ("get", "/api/policies/"),
    ("post", "/api/batches/"),
    ("get", "/api/episodes/"),
    ("post", "/api/annotations/"),
    ("post", "/api/exports/"),
]


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_no_token_is_401_with_the_scheme_to_use(anonymous_api, method, url):
    response = getattr(anonymous_api, method)(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert "credentials were not provided" in response.json()["detail"]


def test_a_wrong_token_is_401(anonymous_api):
    anonymous_api.credentials(HTTP_AUTHORIZATION="Token not-a-real-key")
    response = anonymous_api.get("/api/episodes/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."


def test_password_gives_a_token_that_works(anonymous_api, researcher):
    response = anonymous_api.post(
        "/api/token/", {"username": "rita", "password": "pw-123456"}, format="json"
    )
    assert response.status_code == 200
    anonymous_api.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert anonymous_api.get("/api/benchmarks/").status_code == 200


def test_a_bad_password_says_so(anonymous_api, researcher):
    response = anonymous_api.post("/api/token/", {"username": "rita", "password": "nope"})
    assert response.status_code == 400
    assert "Unable to log in" in response.json()["non_field_errors"][0]


def test_a_user_without_a_role_gets_403_naming_the_roles(db):
    client = factories.client_for(factories.user("nobody", None))
    response = client.get("/api/episodes/")
    assert response.status_code == 403
    assert response.json()["detail"] == "this needs the researcher or annotator role"


def test_requests_past_the_rate_are_throttled(researcher_api, anonymous_api, monkeypatch):
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"user": "3/min", "anon": "1/min"})
    codes = [researcher_api.get("/api/benchmarks/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    assert "Request was throttled" in researcher_api.get("/api/benchmarks/").json()["detail"]
    assert [anonymous_api.get("/api/schema/").status_code for _ in range(2)] == [200, 429]


def test_an_annotator_reads_but_cannot_create_policies(annotator_api):
    assert annotator_api.get("/api/policies/").status_code == 200
    response = annotator_api.post("/api/policies/", {"name": "x", "kind": "baseline"})
    assert response.status_code == 403
    assert "needs the researcher role" in response.json()["detail"]


def test_role_check_uses_the_pages_groups(db):
    account = factories.user("both", Role.ANNOTATOR)
    assert factories.client_for(account).get("/api/benchmarks/").status_code == 200
