"""Small text helpers shared by the render modules: line splitting, compact JSON, surrogate scrubbing."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def split_lines(text: str) -> list[str]:
    """Split like Rust's ``str::lines`` (harmony uses it), but also treating a lone ``\\r`` as a break.

    Harmony re-splits namespace descriptions with ``lines()``, which would silently eat a ``\\r`` before
    ``\\n``; normalising every break here keeps our pre-rendered text unchanged by that round trip.
    """
    if not text:
        return []
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def one_line(text: str) -> str:
    """Text for a trailing ``// comment``, which cannot span lines."""
    return " ".join(line.strip() for line in split_lines(text) if line.strip())


def compact_json(value: Any) -> str:
    """JSON as serde_json's ``Display`` prints it (harmony's ``default:`` comments): no spaces, raw UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def without_surrogates(value: Any) -> Any:
    """``value`` with unpaired UTF-16 surrogates in strings replaced by U+FFFD.

    A JSON body may carry ``"\\ud800"``; openai_harmony's JSON bridge rejects it with a ValueError, which
    would turn a client's odd text into a server error. Values without surrogates are returned as is.
    """
    if isinstance(value, dict | list):
        try:
            orjson.dumps(value)  # refuses any surrogate, in C: far cheaper than the walk below
        except TypeError:
            pass  # a surrogate somewhere (or a value JSON cannot hold): walk it
        else:
            return value
    return _scrubbed(value)


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new = _scrubbed(item)
            changed = changed or new is not item
            out[key] = new
        return out if changed else value
    if isinstance(value, list):
        new_items = [_scrubbed(item) for item in value]
        if any(new is not old for new, old in zip(new_items, value, strict=True)):
            return new_items
        return value
    return value
