"""The export tests use the API tests' users, clients and demo data: one definition."""

from tests.api.conftest import (
    _fresh_throttle_counts,
    annotator,
    annotator_api,
    anonymous_api,
    benchmark,
    policy,
    researcher,
    researcher_api,
)

__all__ = [
    "_fresh_throttle_counts",
    "annotator",
    "annotator_api",
    "anonymous_api",
    "benchmark",
    "policy",
    "researcher",
    "researcher_api",
]
