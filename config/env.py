"""Small typed readers for settings that come from the environment.

Each reader fails loudly, naming the variable and the bad value, instead of letting a typo
become a silent default. They are plain functions so settings.py reads top to bottom.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use one of 1/0, true/false")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_urls(name: str, default: list[str]) -> list[str]:
    """A comma-separated list of http(s) base URLs; the error names the bad entry."""
    from harness_app.harness.llm.upstreams import replica_urls_parse

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return replica_urls_parse(raw, name=name)
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None


def env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).expanduser().resolve() if raw else default


@dataclass(frozen=True)
class DatabaseUrl:
    engine: str
    name: str
    user: str = ""
    password: str = ""
    host: str = ""
    port: str = ""

    def as_django(self) -> dict[str, object]:
        config: dict[str, object] = {
            "ENGINE": self.engine,
            "NAME": self.name,
            "USER": self.user,
            "PASSWORD": self.password,
            "HOST": self.host,
            "PORT": self.port,
        }
        if self.engine.endswith("sqlite3"):
            # WAL lets the web server read while the embedded worker writes. IMMEDIATE takes
            # the write lock when a transaction starts, so concurrent writers wait for it
            # (up to `timeout`) instead of failing at once with "database is locked" when a
            # read transaction tries to upgrade.
            config["OPTIONS"] = {
                "init_command": "PRAGMA journal_mode=WAL;",
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
            }
        else:
            config["CONN_MAX_AGE"] = 60
            config["CONN_HEALTH_CHECKS"] = True
        return config


_ENGINES = {
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
    "sqlite": "django.db.backends.sqlite3",
}


def parse_database_url(url: str, *, variable: str = "DATABASE_URL") -> DatabaseUrl:
    """postgres://user:pass@host:5432/name, sqlite:////absolute/path.db or sqlite:///relative.db."""
    parts = urlsplit(url)
    engine = _ENGINES.get(parts.scheme)
    if engine is None:
        known = ", ".join(sorted(_ENGINES))
        raise ImproperlyConfigured(f"{variable}: unsupported scheme {parts.scheme!r}; use {known}")
    if engine.endswith("sqlite3"):
        path = unquote(parts.path)[1:]  # the URL's own slash; a second one means absolute
        if not path:
            raise ImproperlyConfigured(f"{variable}: sqlite URL needs a path, e.g. sqlite:///db")
        return DatabaseUrl(engine=engine, name=path)
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured(f"{variable}: no database name in {url!r}")
    return DatabaseUrl(
        engine=engine,
        name=name,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        host=parts.hostname or "",
        port=str(parts.port or ""),
    )


def xdist_worker_isolate(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """Give this pytest-xdist worker (`make test` runs several) its own data folder and Redis
    broker database, by rewriting HARNESS_DATA_DIR and CELERY_BROKER_URL before settings
    read them. The rewrite lands in the environment, so the processes a test starts (Celery
    workers, manage.py) inherit the same folder and broker. HARNESS_TEST_WORKER records it
    was done, so that a child process whose settings run this again changes nothing.

    Worker gwN takes Redis database (the configured one) − N: CI's /15 leaves room for 16.
    Returns the worker id, or "" outside xdist."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker or environ.get("HARNESS_TEST_WORKER") == worker:
        return worker
    if not worker.startswith("gw") or not worker[2:].isdigit():
        raise ImproperlyConfigured(f"PYTEST_XDIST_WORKER={worker!r}: expected gw<number>")
    number = int(worker[2:])
    base = environ.get("HARNESS_DATA_DIR")
    if base:
        environ["HARNESS_DATA_DIR"] = str(Path(base) / worker)
    broker = environ.get("CELERY_BROKER_URL", "")
    if broker.startswith(("redis://", "rediss://")):
        environ["CELERY_BROKER_URL"] = _redis_database_minus(broker, number)
    environ["HARNESS_TEST_WORKER"] = worker
    return worker


def _redis_database_minus(url: str, offset: int) -> str:
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise ImproperlyConfigured(f"CELERY_BROKER_URL: database {path!r} is not a number")
    database = int(path or 0) - offset
    if database < 0:
        raise ImproperlyConfigured(
            f"CELERY_BROKER_URL names Redis database {int(path or 0)}, too low for xdist "
            f"worker gw{offset}: worker gwN takes database minus N; use /15"
        )
    return parts._replace(path=f"/{database}").geturl()
