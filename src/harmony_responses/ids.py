"""Id factories injected into the translator: random ones for the server, counting ones for tests."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable

__all__ = ["counting_ids", "random_id"]


def random_id(prefix: str) -> str:
    """``prefix_`` + 48 hex digits, the shape of OpenAI's ids (``resp_68af…``)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def counting_ids() -> Callable[[str], str]:
    """Deterministic ids (``msg_1``, ``rs_2``, …) for tests and reproducible output."""
    counter = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(counter)}"
