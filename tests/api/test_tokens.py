"""API tokens: a lifetime, and revoked by a password change (issue 21.6)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token

from harness_app.services.users import user_password_set
from tests import factories

pytestmark = pytest.mark.django_db


def _token_for(api, username="rita", password="pw-123456"):
    response = api.post("/api/token/", {"username": username, "password": password})
    assert response.status_code == 200, response.content
    return response.json()["token"]


def test_a_password_change_revokes_the_users_tokens(anonymous_api, researcher):
    key = _token_for(anonymous_api)
    user_password_set(user=researcher, password="a-new-pw-789")
    assert not Token.objects.filter(user=researcher).exists()
    anonymous_api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert anonymous_api.get("/api/benchmarks/").status_code == 401
    anonymous_api.credentials()
    assert _token_for(anonymous_api, password="a-new-pw-789") != key


def test_a_password_changed_in_the_admin_revokes_the_users_tokens(
    anonymous_api, researcher, client
):
    key = _token_for(anonymous_api)
    admin = factories.user("root", None)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    response = client.post(
        f"/admin/auth/user/{researcher.pk}/password/",
        {"usable_password": "true", "password1": "x-New-pw-789!", "password2": "x-New-pw-789!"},
    )
    assert response.status_code == 302, response.content
    assert not Token.objects.filter(key=key).exists()
    researcher.refresh_from_db()
    assert researcher.check_password("x-New-pw-789!")


def test_other_saves_keep_the_token(anonymous_api, researcher):
    key = _token_for(anonymous_api)
    researcher.first_name = "Rita"
    researcher.save()
    assert Token.objects.get(user=researcher).key == key


def test_an_expired_token_is_401_saying_so(anonymous_api, researcher, settings):
    settings.API_TOKEN_TTL_S = 3600
    key = _token_for(anonymous_api)
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(seconds=3601))
    anonymous_api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = anonymous_api.get("/api/benchmarks/")
    assert response.status_code == 401
    assert "Token expired" in response.json()["detail"]


def test_the_token_endpoint_replaces_an_expired_token(anonymous_api, researcher, settings):
    settings.API_TOKEN_TTL_S = 3600
    old = _token_for(anonymous_api)
    Token.objects.filter(key=old).update(created=timezone.now() - timedelta(seconds=3601))
    new = _token_for(anonymous_api)
    assert new != old
    anonymous_api.credentials(HTTP_AUTHORIZATION=f"Token {new}")
    assert anonymous_api.get("/api/benchmarks/").status_code == 200


def test_a_young_token_works_and_ttl_zero_means_for_ever(anonymous_api, researcher, settings):
    settings.API_TOKEN_TTL_S = 0
    key = _token_for(anonymous_api)
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(days=3650))
    client = factories.client_for(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/benchmarks/").status_code == 200
