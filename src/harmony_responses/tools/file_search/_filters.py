"""The API's attribute filters (``openai.types.shared.ComparisonFilter`` / ``CompoundFilter``), checked and run.

A comparison is ``{"type": eq|ne|gt|gte|lt|lte|in|nin, "key", "value"}``; a compound ``{"type": and|or,
"filters": [...]}``, nested. A file without the key matches no comparison but ``ne`` and ``nin``; an ordering
comparison between a number and a string matches nothing (as an ordering between different types means
nothing). Filters are run in Python over each candidate file's attributes, the same on both stores.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FilterError", "check_filter", "matches"]

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 8


class FilterError(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_filter(value: Any, param: str = "filters", depth: int = 0) -> None:
    """Raise ``FilterError`` unless ``value`` is a well-formed filter."""
    if not isinstance(value, dict):
        raise FilterError("Invalid filter: expected an object.", param)
    kind = value.get("type")
    if kind in COMPOUNDS:
        filters = value.get("filters")
        if not isinstance(filters, list) or not filters:
            raise FilterError("Invalid compound filter: 'filters' must be a non-empty array.", f"{param}.filters")
        if depth >= MAX_DEPTH:
            raise FilterError(f"Filters nest at most {MAX_DEPTH} levels deep.", param)
        for i, inner in enumerate(filters):
            check_filter(inner, f"{param}.filters[{i}]", depth + 1)
        return
    if kind not in COMPARISONS:
        raise FilterError(
            f"Invalid filter type: {kind!r}. Supported: {', '.join(COMPARISONS + COMPOUNDS)}.", f"{param}.type"
        )
    if not isinstance(value.get("key"), str):
        raise FilterError("Invalid filter: 'key' must be a string.", f"{param}.key")
    target = value.get("value")
    scalars = (str, int, float, bool)
    if kind in ("in", "nin"):
        if not isinstance(target, list) or not all(isinstance(v, scalars) for v in target):
            raise FilterError(f"Invalid filter: '{kind}' takes an array of values.", f"{param}.value")
    elif not isinstance(target, scalars):
        raise FilterError("Invalid filter: 'value' must be a string, number or boolean.", f"{param}.value")


def _ordered(left: Any, right: Any) -> bool:
    numbers = (int, float)
    both_numbers = isinstance(left, numbers) and isinstance(right, numbers)
    return (
        both_numbers
        and not isinstance(left, bool)
        and not isinstance(right, bool)
        or (isinstance(left, str) and isinstance(right, str))
    )


def _same(left: Any, right: Any) -> bool:
    # True is not 1 here: a boolean attribute equals booleans only.
    return bool(left == right) and isinstance(left, bool) == isinstance(right, bool)


def matches(value: dict[str, Any], attributes: dict[str, Any] | None) -> bool:
    """Whether a file with ``attributes`` passes the (checked) filter ``value``."""
    kind = value["type"]
    if kind == "and":
        return all(matches(f, attributes) for f in value["filters"])
    if kind == "or":
        return any(matches(f, attributes) for f in value["filters"])
    attributes = attributes or {}
    present = value["key"] in attributes
    have, want = attributes.get(value["key"]), value["value"]
    if kind in ("eq", "ne"):
        return (present and _same(have, want)) == (kind == "eq")
    if kind in ("in", "nin"):
        return (present and any(_same(have, w) for w in want)) == (kind == "in")
    if not present or not _ordered(have, want):
        return False
    return {"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}[kind]
