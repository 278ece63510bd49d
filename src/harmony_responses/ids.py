"""Id factories injected into the translator: random ones for the server, counting ones for tests."""

from __future__ import annotations

import itertools
import os
import secrets
import threading
from collections.abc import Callable

__all__ = ["MAX_ID_LENGTH", "counting_ids", "id_problem", "random_id"]

# Ids a client supplies (its input items', ``previous_response_id``, ``item_reference``, path ids) are
# stored and looked up: PostgreSQL text cannot hold NUL, and an index row has a size limit (about 2.7 KB),
# so an id that breaks either would fail the store's whole group-commit round. Ours are 50 characters.
MAX_ID_LENGTH = 512


# Random bytes for ids, drawn from the OS a few KiB at a time: a request makes several ids, and one
# getrandom call (through secrets) per id cost more than the rest of making it. Refilled after a fork so
# that no two processes hand out the same ids.
_ID_BYTES = 24
_pool = bytearray()
_pool_lock = threading.Lock()


def _reset_pool() -> None:
    global _pool
    _pool = bytearray()


os.register_at_fork(after_in_child=_reset_pool)


def random_id(prefix: str) -> str:
    """``prefix_`` + 48 hex digits, the shape of OpenAI's ids (``resp_68af…``)."""
    global _pool
    with _pool_lock:
        if len(_pool) < _ID_BYTES:
            _pool = bytearray(secrets.token_bytes(_ID_BYTES * 256))
        raw = _pool[-_ID_BYTES:]
        del _pool[-_ID_BYTES:]
    return f"{prefix}_{raw.hex()}"


def counting_ids() -> Callable[[str], str]:
    """Deterministic ids (``msg_1``, ``rs_2``, …) for tests and reproducible output."""
    counter = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(counter)}"


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a client-supplied id (None: it can): not a string, empty, too long, or control
    characters (NUL above all, which PostgreSQL text cannot hold)."""
    if not isinstance(value, str):
        return "expected a string"
    if not value:
        return "expected a non-empty string"
    if len(value) > MAX_ID_LENGTH:
        return f"expected a string with maximum length {MAX_ID_LENGTH}, but got a string with length {len(value)}"
    if any(c < " " or c == "\x7f" for c in value):
        return "ids cannot contain control characters"
    return None
