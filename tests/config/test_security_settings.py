"""Production's HTTPS settings, the Content-Security-Policy, and error answers (issue 21.9)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.test import Client

from tests import factories
from tests.paths import ROOT


def test_check_deploy_passes_with_the_production_settings(tmp_path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SECURE_", "CSP_", "SESSION_", "CSRF_"))
        # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for their own process; a
        # deployment never has it (async.E001).
        and k
        not in {"DEBUG", "DEPLOYMENT", "SECRET_KEY", "DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    }
    env.update(
        HARNESS_DATA_DIR=str(tmp_path),
        DEPLOYMENT="production",
        SECRET_KEY="a-long-random-production-key-" + "k3y9" * 12,
        ALLOWED_HOSTS="harness.example.org",
        STATIC_MANIFEST="0",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_development_serves_plain_http(settings, db) -> None:
    assert not settings.SECURE_SSL_REDIRECT and not settings.SECURE_HSTS_SECONDS
    response = Client().get("/login/")
    assert response.status_code == 200
    assert "Strict-Transport-Security" not in response


@pytest.mark.django_db
def test_pages_carry_a_csp_that_allows_only_own_scripts(researcher_client) -> None:
    response = researcher_client.get("/")
    assert response.status_code == 200
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert policy["script-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert "<script>" not in response.content.decode()  # no inline script to allow


@pytest.mark.django_db
def test_an_api_error_names_no_file_or_host(researcher, monkeypatch) -> None:
    from harness_app.api import BenchmarkViewSet

    def boom(*args, **kwargs):
        raise RuntimeError(f"{ROOT}/harness_app/secret.py on db.internal")

    monkeypatch.setattr(BenchmarkViewSet, "list", boom)
    client = factories.client_for(researcher)
    client.raise_request_exception = False
    response = client.get("/api/benchmarks/")
    assert response.status_code == 500
    body = response.content.decode()
    assert str(ROOT) not in body and "db.internal" not in body and "Traceback" not in body
