"""Generated and boundary-value requests against the API, as each role; every answer must
be one the schema documents, in the shape it documents, and never a 5xx.

In-process against the WSGI application (no server), with a token. Two generation modes:
valid requests (every documented operation, which must work or answer a documented 4xx)
and invalid ones (which must be refused with a 4xx). Hypothesis runs derandomized, so CI
sees the same requests every time; the boundary values (ids past 64 bits, negative and
non-integer ids, NaN, long strings) are sent to every parameter that could take them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token

from config.wsgi import application
from tests import factories

schemathesis = pytest.importorskip("schemathesis", reason="needs schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.django_db

EXAMPLES = 10
# Operations whose generated requests would start real work on a broker.
SKIPPED = {("POST", "/api/benchmarks/import/")}
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
BAD_IDS = ["0", "-1", str(2**63), str(2**64), "1.7", "true", "1e3", "x" * 300]
# Not an integer at all, or past what a 64-bit column holds: refused naming the parameter.
NOT_INTEGERS = [str(2**63), str(2**64), "1.7", "true", "nan"]
NOT_FINITE = ["nan", "inf", "-inf", "1e999"]
LONG_TEXT = "ä" * 10_000
PAGING = {"page", "cursor"}


def _operations(schema: Any) -> Iterator[Any]:
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) not in SKIPPED:
            yield operation


@pytest.fixture
def keep_connection() -> Iterator[None]:
    """What Django's test client does: requests must not close the test's connection
    (and with it the transaction the test runs in)."""
    signals = (request_started, request_finished)
    for signal in signals:
        signal.disconnect(close_old_connections)
    yield
    for signal in signals:
        signal.connect(close_old_connections)


@pytest.fixture
def world(
    keep_connection: None,
    demo_benchmark: Any,
    baseline_policy: Any,
    researcher: Any,
    annotator: Any,
) -> dict[str, Any]:
    # Batches and exports created here are never sent to a broker: their on-commit hooks
    # never fire, because the test's transaction never commits.
    factories.run_batch(demo_benchmark, baseline_policy, queries=1)
    users = {"researcher": researcher, "annotator": annotator}
    return {
        "schema": schemathesis.openapi.from_wsgi("/api/schema/?format=json", application),
        "auth": {
            role: {"Authorization": f"Token {Token.objects.get_or_create(user=user)[0].key}"}
            for role, user in users.items()
        },
    }


def _problems(case: Any, response: Any) -> list[str]:
    """What the conformance checks found wrong with one answer, one line each."""
    try:
        case.validate_response(response, checks=CONFORMANCE)
    except Exception as error:  # schemathesis raises a Failure or a group of them
        failures = getattr(error, "exceptions", [error])
        where = f"{case.method} {case.formatted_path}"
        if case.query:
            where += f"?{case.query}"
        return [
            f"{where} -> {response.status_code}: {getattr(failure, 'title', failure)}: "
            f"{str(getattr(failure, 'message', ''))[:300]}"
            for failure in failures
        ]
    return []


@pytest.mark.parametrize("role", ["researcher", "annotator"])
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_every_generated_request_gets_a_documented_answer(
    world: dict[str, Any], mode: str, role: str
) -> None:
    generation = schemathesis.GenerationMode(mode)
    auth = world["auth"][role]
    failures: list[str] = []
    codes: Counter[int] = Counter()
    for operation in _operations(world["schema"]):

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=generation))
        def check(case: Any) -> None:
            response = case.call(headers=auth)
            codes[response.status_code] += 1
            failures.extend(_problems(case, response))

        check()
    assert not failures, "\n".join(sorted(set(failures)))
    print(mode, role, sorted(codes.items()))
    assert sum(n for code, n in codes.items() if code < 300) > 0  # the requests reached views


def _parameters(operation: Any, where: str) -> list[dict[str, Any]]:
    definition = operation.definition.raw
    return [p for p in definition.get("parameters", []) if p.get("in") == where]


def _type(parameter: dict[str, Any]) -> str:
    return str(parameter.get("schema", {}).get("type", ""))


def test_bad_ids_in_a_path_answer_a_documented_404_or_400(world: dict[str, Any]) -> None:
    auth = world["auth"]["researcher"]
    failures: list[str] = []
    tried = 0
    for operation in _operations(world["schema"]):
        names = [p["name"] for p in _parameters(operation, "path")]
        if not names:
            continue
        for value in BAD_IDS:
            case = operation.Case(path_parameters=dict.fromkeys(names, value))
            response = case.call(headers=auth)
            tried += 1
            failures.extend(_problems(case, response))
            if response.status_code not in (400, 404):
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}")
    assert tried > 50
    assert not failures, "\n".join(failures)


def test_bad_numbers_in_a_query_are_refused_naming_the_parameter(
    world: dict[str, Any],
) -> None:
    auth = world["auth"]["researcher"]
    failures: list[str] = []
    tried = 0
    for operation in _operations(world["schema"]):
        if _parameters(operation, "path"):
            continue  # a row's own actions: the path's id is refused first
        for parameter in _parameters(operation, "query"):
            kind = _type(parameter)
            values = {"integer": NOT_INTEGERS, "number": NOT_FINITE}.get(kind, [LONG_TEXT])
            for value in values:
                case = operation.Case(query={parameter["name"]: value})
                response = case.call(headers=auth)
                tried += 1
                failures.extend(_problems(case, response))
                if kind not in ("integer", "number"):
                    continue
                if parameter["name"] in PAGING and response.status_code == 404:
                    continue  # DRF's documented answer to a page that is not one
                named = parameter["name"] in response.text
                if response.status_code != 400 or not named:
                    failures.append(
                        f"{case.method} {case.formatted_path}?{parameter['name']}={value} -> "
                        f"{response.status_code} {response.text[:200]}"
                    )
    assert tried > 30
    assert not failures, "\n".join(failures)


def test_bad_ids_in_a_body_are_refused_naming_the_field(world: dict[str, Any]) -> None:
    auth = world["auth"]["researcher"]
    failures: list[str] = []
    tried = 0
    for operation in _operations(world["schema"]):
        body = operation.body
        if operation.method.upper() not in ("POST", "PUT", "PATCH") or not len(body):
            continue
        if _parameters(operation, "path"):
            continue  # a row's own actions: the path's id is refused first
        schema = _resolved_body_schema(world["schema"], operation)
        for name, field in schema.get("properties", {}).items():
            if field.get("readOnly") or field.get("type") not in ("integer", "number"):
                continue
            values = (1.7, True, "x") if field["type"] == "integer" else ("nan", "inf", "x")
            for value in values:
                case = operation.Case(body={name: value}, media_type="application/json")
                response = case.call(headers=auth)
                tried += 1
                failures.extend(_problems(case, response))
                if response.status_code != 400 or name not in response.json():
                    failures.append(
                        f"{case.method} {case.formatted_path} {{{name}: {value!r}}} -> "
                        f"{response.status_code} {response.text[:200]}"
                    )
    assert tried > 10
    assert not failures, "\n".join(failures)


def _resolved_body_schema(schema: Any, operation: Any) -> dict[str, Any]:
    content = operation.definition.raw.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema", {})
    ref = body.get("$ref", "")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return dict(schema.raw_schema["components"]["schemas"][name])
    return dict(body)
