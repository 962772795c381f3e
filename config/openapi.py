"""The API schema's error answers, documented once for every operation.

drf-spectacular documents what a view returns when it works. The errors come from DRF
and from the project's own checks, the same way for every view, so they are added here by
one postprocessing hook rather than by a decorator on each view:

- 400, when the operation takes a body or query parameters: a JSON object whose keys name
  the refused fields (or `detail` for the request as a whole), each with its messages;
- 401 and 403, unless the operation is open to anyone: no or expired credentials, or a
  role that may not do this;
- 404, when the path names a row, or the list is paged (an unknown page or cursor);
- 415, when the operation reads a body: a content type it does not parse;
- 429, always: the throttles and the login lockout (docs/operations.md).

Every error body has DRF's shape: `{"detail": "..."}`, or the field errors for a 400.
A generated client thus knows every status the server may send, and
tests/api/test_schemathesis.py checks each answer against this schema.
"""

from __future__ import annotations

from typing import Any

ERROR = "Error"
FIELD_ERRORS = "FieldErrors"

COMPONENTS: dict[str, dict[str, Any]] = {
    ERROR: {
        "type": "object",
        "description": "Why the request was refused.",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
    },
    FIELD_ERRORS: {
        "type": "object",
        "description": (
            "The refused fields, each with its messages (nested for nested fields); "
            "`detail` or `non_field_errors` when the request as a whole was refused."
        ),
        "additionalProperties": {},
    },
}

DESCRIPTIONS = {
    "400": "Bad input: each refused field is named with its messages.",
    "401": "No credentials, or a token that is unknown or has expired.",
    "403": "The user's role may not do this.",
    "404": "No such row, page or cursor.",
    "415": "The body's content type is not one this operation reads.",
    "429": "Too many requests (throttled, or locked out after failed logins); see Retry-After.",
}

PAGING_PARAMETERS = frozenset({"page", "cursor"})
BODY_METHODS = frozenset({"post", "put", "patch"})


def _answer(code: str) -> dict[str, Any]:
    name = FIELD_ERRORS if code == "400" else ERROR
    return {
        "description": DESCRIPTIONS[code],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def error_codes(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    """The error statuses an operation may answer, by the rules in the module docstring."""
    parameters = operation.get("parameters", [])
    in_query = [p for p in parameters if p.get("in") == "query"]
    has_body = method in BODY_METHODS
    public = any(not requirement for requirement in operation.get("security", [{}]))
    codes = []
    if has_body or in_query:
        codes.append("400")
    if not public:
        codes += ["401", "403"]
    if "{" in path or any(p["name"] in PAGING_PARAMETERS for p in in_query):
        codes.append("404")
    if has_body:
        codes.append("415")
    codes.append("429")
    return codes


def add_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook (POSTPROCESSING_HOOKS in config/settings.py)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, component in COMPONENTS.items():
        schemas.setdefault(name, component)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for code in error_codes(path, method, operation):
                responses.setdefault(code, _answer(code))
    return result
