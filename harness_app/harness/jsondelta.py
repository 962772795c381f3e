"""Compact deltas between successive JSON snapshots of the harness state.

A full state snapshot grows with the episode (pool, memory, evidence graph), so storing one
per turn costs O(turns²). Between two turns most of it is unchanged or only appended to,
so a turn stores the delta from the previous one:

    {"set": {key: value}, "del": [key], "sub": {key: delta}, "app": {key: [items]}}

`set` replaces or adds a key, `del` removes one, `sub` recurses into a nested object, and
`app` extends a list whose old value is a prefix of the new one. `apply(prev, diff(prev,
cur)) == cur` for any JSON objects; the property is tested with hypothesis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JsonObject = dict[str, Any]


def diff(prev: Mapping[str, Any], cur: Mapping[str, Any]) -> JsonObject:
    """The delta turning `prev` into `cur` (both JSON objects); {} when they are equal."""
    out: JsonObject = {}
    removed = [k for k in prev if k not in cur]
    if removed:
        out["del"] = removed
    for key, value in cur.items():
        if key not in prev:
            out.setdefault("set", {})[key] = value
            continue
        old = prev[key]
        if old == value:
            continue
        if isinstance(old, dict) and isinstance(value, dict):
            out.setdefault("sub", {})[key] = diff(old, value)
        elif _extends(old, value):
            out.setdefault("app", {})[key] = value[len(old) :]
        else:
            out.setdefault("set", {})[key] = value
    return out


def _extends(old: Any, new: Any) -> bool:
    return (
        isinstance(old, list)
        and isinstance(new, list)
        and len(new) > len(old)
        and new[: len(old)] == old
    )


def apply(base: Mapping[str, Any], delta: Mapping[str, Any]) -> JsonObject:
    """A new object: `base` with `delta` applied. `base` is not modified."""
    out = dict(base)
    for key in delta.get("del", ()):
        out.pop(key, None)
    out.update(delta.get("set", {}))
    for key, items in delta.get("app", {}).items():
        out[key] = [*out[key], *items]
    for key, sub in delta.get("sub", {}).items():
        out[key] = apply(out[key], sub)
    return out
