"""Tool definitions: one JSON schema per tool, used both to describe and to validate.

The schemas are what `SearchHarness.tool_schemas()` hands to the policy (OpenAI
function-calling format), and `parse_arguments` validates a model's arguments against the
very same schema, so the description and the checks cannot drift apart. The validator
covers the small JSON-schema subset these tools use (object/string/array, required,
additionalProperties, min/max lengths and items, enum) and words its errors for a model
to act on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness_app.harness.ablation import Ablation
from harness_app.harness.state import IMPORTANCE_LEVELS
from harness_app.harness.types import JSONObject

# The tool names, as models call them and as state and persisted episodes record them.
SEARCH_CORPUS = "search_corpus"
FAN_OUT_SEARCH = "fan_out_search"
GREP_CORPUS = "grep_corpus"
READ_DOCUMENT = "read_document"
REVIEW_DOCS = "review_docs"
CURATE = "curate"
VERIFY = "verify"
END_SEARCH = "end_search"
# Ranked retrieval, unlike grep: only these auto-seed the curated set and quote their query.
SEARCH_TOOLS = frozenset({SEARCH_CORPUS, FAN_OUT_SEARCH})


class ArgumentError(ValueError):
    """Arguments the model sent do not fit the tool's schema; the message says how."""


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """The numbers the schemas advertise; taken from HarnessConfig."""

    max_queries: int = 5
    max_ids: int = 5
    max_curate_ids: int = 30
    max_query_chars: int = 500
    max_pattern_chars: int = 200
    max_claim_chars: int = 1000


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    mechanism: str = ""  # the Ablation field that must be on for the tool to run
    # What validation accepts when it is wider than what is advertised (see curate).
    accepts: dict[str, Any] | None = None

    def schema(self) -> JSONObject:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _obj(properties: dict[str, Any], required: list[str]) -> JSONObject:
    return {
        "type": "object",
        "properties": properties,
        "required": [*required],
        "additionalProperties": False,
    }


def _string(description: str, max_length: int) -> JSONObject:
    return {
        "type": "string",
        "description": description,
        "minLength": 1,
        "maxLength": max_length,
    }


def _ids(description: str, max_items: int, min_items: int = 1) -> JSONObject:
    return {
        "type": "array",
        "description": description,
        "items": {"type": "string", "minLength": 1},
        "minItems": min_items,
        "maxItems": max_items,
    }


def tool_specs(
    limits: ToolLimits, ablation: Ablation, *, keep_ablated: bool = True
) -> list[ToolSpec]:
    """The tools advertised under this ablation, in a stable order.

    With `keep_ablated` (Harness-1's way) a switched-off mechanism leaves the interface as
    it was: every tool and field is advertised as in the full harness, and the harness
    answers a disabled tool's calls with a note that it is unavailable. Without it, the
    tools of switched-off mechanisms and curate's `importance` field are not advertised.
    """
    specs = [
        ToolSpec(
            SEARCH_CORPUS,
            "BM25 search. Returns the top documents not already returned in this episode.",
            _obj({"query": _string("Search query.", limits.max_query_chars)}, ["query"]),
        ),
        ToolSpec(
            FAN_OUT_SEARCH,
            f"Run up to {limits.max_queries} searches at once, e.g. one per sub-question.",
            _obj(
                {
                    "queries": {
                        "type": "array",
                        "items": _string("Search query.", limits.max_query_chars),
                        "minItems": 1,
                        "maxItems": limits.max_queries,
                    }
                },
                ["queries"],
            ),
        ),
        ToolSpec(
            GREP_CORPUS,
            "Regular-expression scan of the corpus (case-sensitive; start with (?i) to "
            "ignore case); at most 5 matching documents, with the matched text.",
            _obj(
                {"pattern": _string("Python regular expression.", limits.max_pattern_chars)},
                ["pattern"],
            ),
        ),
        ToolSpec(
            READ_DOCUMENT,
            "Show the full text of one document.",
            _obj({"doc_id": _string("Document id.", 300)}, ["doc_id"]),
        ),
        ToolSpec(
            REVIEW_DOCS,
            "Recall what you already saw of up to 5 documents, from memory (no new search).",
            _obj(
                {"doc_ids": _ids("Ids seen earlier in this episode.", limits.max_ids)}, ["doc_ids"]
            ),
            mechanism="review_docs",
        ),
        _curate_spec(limits, ablation.importance_tags or keep_ablated),
        ToolSpec(
            VERIFY,
            "Check whether documents support a claim; returns a verdict and evidence "
            "sentences per document.",
            _obj(
                {
                    "claim": _string("The statement to check.", limits.max_claim_chars),
                    "doc_ids": _ids("Documents to check it against.", limits.max_ids),
                },
                ["claim", "doc_ids"],
            ),
            mechanism="verification",
        ),
        ToolSpec(
            END_SEARCH,
            "Finish the episode; the curated set is your answer.",
            _obj({"reasoning": {"type": "string", "description": "Why you are done."}}, []),
        ),
    ]
    if keep_ablated:
        return specs
    return [s for s in specs if not s.mechanism or getattr(ablation, s.mechanism)]


def _curate_spec(limits: ToolLimits, advertise_tags: bool) -> ToolSpec:
    properties: dict[str, Any] = {
        "add_ids": _ids("Documents to add.", limits.max_curate_ids, min_items=0),
        "remove_ids": _ids("Documents to remove.", limits.max_curate_ids, min_items=0),
        "importance": {
            "type": "object",
            "description": "Tag per doc id (adds or retags); default fair.",
            "additionalProperties": {"type": "string", "enum": list(IMPORTANCE_LEVELS)},
        },
    }
    description = "Add documents to, or remove them from, the curated evidence set"
    if advertise_tags:
        description += (
            f" (capacity {limits.max_curate_ids}; when full, a doc of a strictly lower tag "
            "is evicted)."
        )
        return ToolSpec(CURATE, description, _obj(properties, []))
    # Ablated tags are ignored rather than rejected: a policy trained with tags must not
    # rack up format errors merely because this episode does not use them.
    advertised = {k: v for k, v in properties.items() if k != "importance"}
    return ToolSpec(
        CURATE,
        description + f" (capacity {limits.max_curate_ids}).",
        _obj(advertised, []),
        accepts=_obj(properties, []),
    )


def parse_arguments(spec: ToolSpec, raw: object) -> dict[str, Any]:
    """The arguments as a dict that satisfies the spec's schema, or ArgumentError."""
    if isinstance(raw, str):
        raw = _decode(raw)
    if not isinstance(raw, dict):
        raise ArgumentError(f"arguments must be a JSON object, got {_type_name(raw)}")
    _check(spec.accepts or spec.parameters, raw, "")
    return raw


def _decode(raw: str) -> object:
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        shown = raw if len(raw) <= 80 else raw[:77] + "..."
        raise ArgumentError(
            f"arguments are not valid JSON ({exc.msg} at {exc.pos}): {shown!r}"
        ) from None


def _check(schema: dict[str, Any], value: object, where: str) -> None:
    kind = schema.get("type")
    if kind == "object":
        _check_object(schema, value, where)
    elif kind == "array":
        _check_array(schema, value, where)
    elif kind == "string":
        _check_string(schema, value, where)


def _check_object(schema: dict[str, Any], value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise ArgumentError(f"{_label(where)} must be an object, got {_type_name(value)}")
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            raise ArgumentError(f"missing required field {_join(where, name)!r}")
    extra_schema = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(properties[name], item, _join(where, name))
        elif extra_schema is False:
            allowed = ", ".join(properties) or "none"
            raise ArgumentError(f"unexpected field {_join(where, name)!r} (allowed: {allowed})")
        elif isinstance(extra_schema, dict):
            _check(extra_schema, item, f"{where}[{name!r}]")


def _check_array(schema: dict[str, Any], value: object, where: str) -> None:
    if not isinstance(value, list):
        raise ArgumentError(f"{_label(where)} must be an array, got {_type_name(value)}")
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None and len(value) < low:
        raise ArgumentError(f"{_label(where)} has {len(value)} items; at least {low} required")
    if high is not None and len(value) > high:
        raise ArgumentError(f"{_label(where)} has {len(value)} items; at most {high} allowed")
    for index, item in enumerate(value):
        _check(schema.get("items", {}), item, f"{where}[{index}]")


def _check_string(schema: dict[str, Any], value: object, where: str) -> None:
    if not isinstance(value, str):
        raise ArgumentError(f"{_label(where)} must be a string, got {_type_name(value)}")
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        raise ArgumentError(f"{_label(where)} must be one of {', '.join(enum)}; got {value!r}")
    if len(value.strip()) < schema.get("minLength", 0):
        raise ArgumentError(f"{_label(where)} must not be empty")
    high = schema.get("maxLength")
    if high is not None and len(value) > high:
        raise ArgumentError(f"{_label(where)} is {len(value)} characters; at most {high} allowed")


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _label(where: str) -> str:
    return f"field {where!r}" if where else "arguments"


def _type_name(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )
