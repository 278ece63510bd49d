"""The optional compiled modules (setup.py): each function taken from its module where it was built, and what
start-up says of it.

Where a module was not built (no C compiler at install) or ``HARMONY_RESPONSES_PURE_PYTHON`` is set, its caller
runs its pure-Python path instead, to the same results, and start-up says so and why.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["PURE_PYTHON", "describe", "load"]

# Set (to anything non-empty): every compiled module is left unused.
PURE_PYTHON = "HARMONY_RESPONSES_PURE_PYTHON"


def load(module: str, name: str, noun: str) -> tuple[Any, str | None]:
    """``(function, None)``: ``name`` of the compiled ``module``; or ``(None, why not)``. ``noun`` names it in
    the reason ("scanner": "the compiled scanner was not built (...)")."""
    try:
        function = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        return None, f"the compiled {noun} was not built ({exc})"
    if os.environ.get(PURE_PYTHON):
        return None, f"{PURE_PYTHON} is set"
    return function, None


def describe(compiled: object, why_not: str | None, done: str, noun: str) -> str:
    """What start-up says of a compiled step: "``done`` by the compiled ``noun``", or "``done`` in pure Python:"
    and why (``why_not``; none when its caller turned it off, as the tests do)."""
    if compiled is not None:
        return f"{done} by the compiled {noun}"
    return f"{done} in pure Python: {why_not or f'the compiled {noun} is off'}"
