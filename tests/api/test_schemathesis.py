"""Schemathesis generates requests from the schema; none may get a 5xx.

In-process against the WSGI application (no server), as a researcher with a token, a
bounded number of examples per operation. Two generation modes: valid requests (every
documented operation, which must work or answer 4xx) and invalid ones (which must be
refused with 4xx, never crash).
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings

from config.wsgi import application
from tests import factories

schemathesis = pytest.importorskip("schemathesis", reason="needs schemathesis")

pytestmark = pytest.mark.django_db

EXAMPLES = 6
# Operations whose generated requests would start real work on a broker.
SKIPPED = {("POST", "/api/benchmarks/import/")}


def _operations(schema):
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) not in SKIPPED:
            yield operation


@pytest.fixture
def keep_connection():
    """What Django's test client does: requests must not close the test's connection
    (and with it the transaction the test runs in)."""
    signals = (request_started, request_finished)
    for signal in signals:
        signal.disconnect(close_old_connections)
    yield
    for signal in signals:
        signal.connect(close_old_connections)


@pytest.fixture
def world(keep_connection, demo_benchmark, baseline_policy, researcher):
    batch = factories.run_batch(demo_benchmark, baseline_policy, queries=1)
    return {"batch": batch, "token": factories.client_for(researcher)._credentials}


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_generated_request_gets_a_server_error(world, mode):
    # Batches and exports created here are never sent to a broker: their on-commit hooks
    # never fire, because the test's transaction never commits.
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    headers = dict(world["token"])
    auth = {"Authorization": headers["HTTP_AUTHORIZATION"]}
    generation = schemathesis.GenerationMode(mode)
    failures: list[str] = []
    codes: Counter[int] = Counter()
    for operation in _operations(schema):

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=generation))
        def check(case):
            response = case.call(headers=auth)
            codes[response.status_code] += 1
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}")

        check()
    assert not failures, "\n".join(failures)
    print(mode, sorted(codes.items()))
    assert sum(n for code, n in codes.items() if code < 300) > 0  # the requests did reach views
