"""API tokens that expire (issue 21.6).

DRF's tokens never expire and outlive the password that obtained them. Here a token older
than API_TOKEN_TTL_S seconds (0: no limit) is refused with 401 and a message that says
so (POST /api/token/, harness_app/api.py, replaces an expired token with a new one through
`services.users.api_token_obtain`); a password change revokes the user's tokens
(`services.users.user_password_set`). No DRF view is imported here: DRF's settings import
this module while its views are being defined.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token


def token_expired(token: Token) -> bool:
    """Whether the token is older than API_TOKEN_TTL_S (never, when that is 0)."""
    ttl = settings.API_TOKEN_TTL_S
    return bool(ttl) and token.created < timezone.now() - timedelta(seconds=ttl)


class ExpiringTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`, refused once the token has outlived its lifetime."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        user, token = super().authenticate_credentials(key)
        if token_expired(token):
            raise exceptions.AuthenticationFailed(
                "Token expired: POST your username and password to /api/token/ for a new one."
            )
        return user, token
