"""JSON bodies nested past the limit: a 400 that says so on every API endpoint, the anonymous
token endpoint included, instead of a RecursionError logged with its traceback."""

from __future__ import annotations

import logging

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.parsers import JSONParser

from harness_app.json_body import MAX_JSON_DEPTH, DepthLimitedJSONParser
from trajectories.models import EvaluationRun

pytestmark = pytest.mark.django_db


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _no_error_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("levels", [50_000, MAX_JSON_DEPTH + 1])
def test_anonymous_token_request_nested_too_deep_is_400_saying_the_limit(
    anonymous_api, caplog, levels
):
    body = '{"username": ' + nested(levels) + "}"
    with caplog.at_level(logging.INFO):
        response = anonymous_api.post("/api/token/", body, content_type="application/json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "nested too deeply" in detail and f"at most {MAX_JSON_DEPTH} levels" in detail
    _no_error_logged(caplog)


def test_a_write_endpoint_refuses_deep_json_and_writes_nothing(researcher_api, caplog):
    body = '{"name": "deep", "benchmarks": ' + nested(50_000) + "}"
    with caplog.at_level(logging.INFO):
        response = researcher_api.post(
            "/api/evaluation-runs/", body, content_type="application/json"
        )
    assert response.status_code == 400
    assert f"at most {MAX_JSON_DEPTH} levels" in response.json()["detail"]
    assert EvaluationRun.objects.count() == 0
    _no_error_logged(caplog)


def test_nesting_up_to_the_limit_still_parses(anonymous_api):
    # Brackets inside strings are text, not nesting.
    body = '{"username": ' + nested(MAX_JSON_DEPTH - 1) + ', "password": "' + "[" * 5000 + '"}'
    response = anonymous_api.post("/api/token/", body, content_type="application/json")
    assert response.status_code == 400  # a wrong login, not a parse error
    assert "nested" not in str(response.json())


def _views(patterns: list[URLPattern | URLResolver]) -> list[type]:
    found = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += _views(pattern.url_patterns)
        elif cls := getattr(pattern.callback, "cls", None):
            found.append(cls)
    return found


def test_every_api_view_reads_json_through_the_depth_limit():
    views = _views(get_resolver().url_patterns)
    assert len(views) > 20
    for view in views:
        for parser in view.parser_classes:
            if issubclass(parser, JSONParser):
                assert issubclass(parser, DepthLimitedJSONParser), view
