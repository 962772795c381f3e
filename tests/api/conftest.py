from __future__ import annotations

import pytest
from django.core.cache import cache

from harness_app.roles import Role
from tests import factories


@pytest.fixture(autouse=True)
def _fresh_throttle_counts():
    # Throttle counts live in the cache; each test starts with none.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def benchmark(db):
    return factories.demo_benchmark()


@pytest.fixture
def policy(db):
    return factories.baseline_policy()


@pytest.fixture
def researcher(db):
    return factories.user("rita", Role.RESEARCHER)


@pytest.fixture
def annotator(db):
    return factories.user("anna", Role.ANNOTATOR)


@pytest.fixture
def researcher_api(researcher):
    return factories.client_for(researcher)


@pytest.fixture
def annotator_api(annotator):
    return factories.client_for(annotator)


@pytest.fixture
def anonymous_api():
    return factories.client_for(None)
