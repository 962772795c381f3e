"""Row ids from outside (query strings, JSON bodies, filters), checked before any query.

A database id is a positive 64-bit integer. Anything else, `true`, `1.7`, `-3`, `1e3` or
a 30-digit number, is refused here with None, so callers answer 400 naming the field,
instead of passing it on: JSON's true and 1.7 become 1 under int(), and a number past
64 bits makes the driver raise OverflowError (a 500) inside the query.
"""

from __future__ import annotations

from typing import Any

MAX_ID = 2**63 - 1


def as_id(value: Any) -> int | None:
    """`value` as a row id, or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.strip().isdigit():
        number = int(value.strip())
    else:
        return None
    return number if 1 <= number <= MAX_ID else None


def id_problem(value: Any) -> str:
    """Why `value` is not a row id, in words for a 400."""
    return f"expected a positive whole-number id below 2^63, got {value!r}"
