"""Settings read from the environment: typed helpers and the production guard."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, parse_database_url
from tests.paths import ROOT


def test_postgres_url_is_split_into_django_fields() -> None:
    db = parse_database_url("postgres://alice:s%40cret@db.internal:5433/harness")
    assert (db.user, db.password, db.host, db.port, db.name) == (
        "alice",
        "s@cret",
        "db.internal",
        "5433",
        "harness",
    )
    assert db.as_django()["ENGINE"] == "django.db.backends.postgresql"


def test_sqlite_url_keeps_absolute_path() -> None:
    assert parse_database_url("sqlite:////tmp/x/harness.db").name == "/tmp/x/harness.db"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "unsupported scheme 'mysql'"),
        ("postgres://u@h:5432/", "no database name"),
    ],
)
def test_bad_database_url_names_the_problem(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        parse_database_url(url)


def test_bool_and_int_readers_reject_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="SOME_FLAG='maybe' is not a boolean"):
        env_bool("SOME_FLAG", False)
    monkeypatch.setenv("SOME_NUMBER", "ten")
    with pytest.raises(ImproperlyConfigured, match="SOME_NUMBER='ten' is not an integer"):
        env_int("SOME_NUMBER", 1)
    monkeypatch.setenv("SOME_FLAG", "off")
    assert env_bool("SOME_FLAG", True) is False


def _start_django(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DEPLOYMENT"}}
    clean.update({"HARNESS_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings"})
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_to_start_without_secret_key(tmp_path) -> None:
    result = _start_django(tmp_path, DEPLOYMENT="production", ALLOWED_HOSTS="example.org")
    assert result.returncode != 0
    assert "needs SECRET_KEY" in result.stderr


def test_production_refuses_debug(tmp_path) -> None:
    result = _start_django(tmp_path, DEPLOYMENT="production", SECRET_KEY="x" * 50, DEBUG="1")
    assert result.returncode != 0
    assert "DEBUG on would leak" in result.stderr


def test_production_starts_when_configured(tmp_path) -> None:
    result = _start_django(tmp_path, DEPLOYMENT="production", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_embedded_defaults_need_no_server(tmp_path) -> None:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL)"
    )
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    clean.update({"HARNESS_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings"})
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True
    )
    assert result.stdout.split() == ["django.db.backends.sqlite3", "filesystem://"]
    assert (tmp_path / "broker" / "queue").is_dir()


def _replica_settings(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.VLLM_BASE_URL, ','.join(s.VLLM_BASE_URLS), ','.join(s.PROXY_UPSTREAM_URLS))"
    )
    names = {"VLLM_BASE_URL", "VLLM_BASE_URLS", "PROXY_UPSTREAM_URL", "PROXY_UPSTREAM_URLS"}
    clean = {k: v for k, v in os.environ.items() if k not in names}
    clean.update({"HARNESS_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings"})
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True
    )


def test_vllm_replicas_are_listed_and_the_first_is_the_base_url(tmp_path) -> None:
    result = _replica_settings(tmp_path, VLLM_BASE_URLS="http://a:8000/v1/, http://b:8000/v1")
    assert result.returncode == 0, result.stderr
    first, replicas, proxied = result.stdout.split()
    assert first == "http://a:8000/v1"
    assert replicas == proxied == "http://a:8000/v1,http://b:8000/v1"
    # A proxy upstream of its own is not one of the replicas: the proxy keeps to it.
    result = _replica_settings(
        tmp_path,
        VLLM_BASE_URLS="http://a:8000/v1,http://b:8000/v1",
        PROXY_UPSTREAM_URL="http://c/v1",
    )
    assert result.stdout.split()[2] == "http://c/v1"


def test_a_bad_replica_url_stops_the_start_naming_it(tmp_path) -> None:
    result = _replica_settings(tmp_path, VLLM_BASE_URLS="http://a:8000/v1,vllm-b:8000")
    assert result.returncode != 0
    assert "VLLM_BASE_URLS entry 2 ('vllm-b:8000') is not an http(s) URL" in result.stderr
