"""quotas — per-API-key rate limits, concurrency limits and service tiers (the config file's ``[[keys]]``).

``_limits`` reads the ``[[keys]]`` tables (``KeyLimits``); ``_counters`` keeps the counters in a database
every process of the server shares (``--workers``, gateways on one PostgreSQL store); ``_quotas`` admits
requests, holds responses' slots and takes their tokens as they are produced. The HTTP side (headers, the
429s) is ``http/quotas.py``; WebSocket turns are admitted in ``http/websocket.py``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ._counters import DB_FILE, SLOT_TTL, Counters, Levels, PostgresCounters, SQLiteCounters
from ._limits import TIERS, KeyLimits, key_id, parse_keys, requestable_tiers
from ._quotas import CURRENT, TAKE_EVERY, Grant, QuotaExceeded, Quotas, duration, resolve_tier

__all__ = [
    "CURRENT",
    "SLOT_TTL",
    "TAKE_EVERY",
    "TIERS",
    "Counters",
    "Grant",
    "KeyLimits",
    "Levels",
    "PostgresCounters",
    "QuotaExceeded",
    "Quotas",
    "SQLiteCounters",
    "counters_for",
    "duration",
    "key_id",
    "parse_keys",
    "requestable_tiers",
    "resolve_tier",
]


def counters_for(store: str, data_dir: str | os.PathLike[str] | None) -> Counters:
    """The counters beside the store ``store`` names (``--store``): its PostgreSQL database, or a SQLite file
    in the same folder as its SQLite file."""
    from ..store import SQLiteStore, store_from_spec

    spec = store_from_spec(store, data_dir)
    if isinstance(spec, SQLiteStore):
        return SQLiteCounters(Path(spec.path).parent / DB_FILE)
    return PostgresCounters(store.strip())


def quotas_for(keys: Sequence[KeyLimits], store: str, data_dir: str | os.PathLike[str] | None) -> Quotas | None:
    """The server's quotas (None: no key has a limit, so nothing is counted)."""
    if not any(
        k.limited or k.max_concurrent is not None or k.max_concurrent_background is not None or k.service_tiers
        for k in keys
    ):
        return None
    return Quotas(keys, counters_for(store, data_dir))


__all__ += ["quotas_for"]
