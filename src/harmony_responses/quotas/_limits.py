"""The ``[[keys]]`` tables of the config file: one API key's limits and the service tiers it may use.

```toml
[[keys]]
key = "sk-…"                 # or key_env = "NAME": the key is read from that environment variable
name = "team-a"              # optional: the key's label in metrics and logs (default: a hash prefix)
requests_per_minute = 600
tokens_per_minute = 2_000_000
max_concurrent = 32
max_concurrent_background = 8
service_tiers = ["default", "flex"]
```

Every limit is optional (absent: unlimited). A key given with ``--api-key`` has no limits and every tier.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ASKED", "TIERS", "KeyLimits", "key_id", "parse_keys"]

# The tiers a response runs in; ``auto`` is a request's choice, never a tier used.
TIERS = ("default", "flex", "priority")
# What a request may ask for (openai's ``ServiceTier``) and the tier each runs in: the API shows ``fast``
# as ``priority``; ``scale`` (reserved capacity) and ``ultrafast`` have no counterpart here but those.
ASKED = {
    "auto": None,
    "default": "default",
    "flex": "flex",
    "priority": "priority",
    "fast": "priority",
    "ultrafast": "priority",
    "scale": "default",
}
_REQUESTABLE = tuple(ASKED)
_LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent", "max_concurrent_background")
_FIELDS = frozenset({"key", "key_env", "name", "service_tiers", *_LIMIT_FIELDS})


def key_id(key: str) -> str:
    """What the counters and the store know a key by: its SHA-256 (``http.auth.owner_of``'s), never the key."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyLimits:
    """One key's limits (None: unlimited) and the tiers it may ask for (None: all)."""

    key: str
    name: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    max_concurrent_background: int | None = None
    service_tiers: tuple[str, ...] | None = None

    @property
    def id(self) -> str:
        return key_id(self.key)

    @property
    def limited(self) -> bool:
        return self.requests_per_minute is not None or self.tokens_per_minute is not None

    def tier(self, requested: str | None) -> str | None:
        """The tier a request asking for ``requested`` runs in; None: the key may not use it.

        ``auto`` (or nothing) is ``default`` when the key may use it, else its first allowed tier."""
        allowed = self.service_tiers
        requested = ASKED.get(requested or "auto")
        if requested is None:
            if allowed is None or "default" in allowed:
                return "default"
            return allowed[0]
        if allowed is None or requested in allowed:
            return requested
        return None

    def __repr__(self) -> str:  # never the key itself
        return f"KeyLimits(name={self.name!r})"


def _positive(where: str, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {field} must be a positive integer, got {value!r}")
    return value


def parse_keys(tables: Any, *, where: str = "config file", env: Mapping[str, str] | None = None) -> list[KeyLimits]:
    """The ``[[keys]]`` array of tables as ``KeyLimits``.

    Raises:
        ValueError: not an array of tables, an unknown field, a missing or empty key (or its environment
            variable unset), a limit that is not a positive integer, a tier the API does not have, a key
            given twice.
    """
    environ = os.environ if env is None else env
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ValueError(f"{where}: 'keys' must be an array of tables ([[keys]])")
    out: list[KeyLimits] = []
    for n, table in enumerate(tables, start=1):
        at = f"{where}: [[keys]] #{n}"
        unknown = sorted(set(table) - _FIELDS)
        if unknown:
            raise ValueError(f"{at}: unknown field '{unknown[0]}' (fields: {', '.join(sorted(_FIELDS))})")
        if ("key" in table) == ("key_env" in table):
            raise ValueError(f"{at}: give exactly one of 'key' and 'key_env'")
        if "key_env" in table:
            variable = table["key_env"]
            key = environ.get(variable, "") if isinstance(variable, str) else ""
            if not key:
                raise ValueError(f"{at}: the environment variable {variable!r} (key_env) is not set")
        else:
            key = table["key"]
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"{at}: 'key' must be a non-empty string")
        key = key.strip()
        limits = {f: _positive(at, f, table[f]) for f in _LIMIT_FIELDS if f in table}
        tiers: tuple[str, ...] | None = None
        if "service_tiers" in table:
            value = table["service_tiers"]
            if not isinstance(value, list) or not value or not all(t in TIERS for t in value):
                raise ValueError(f"{at}: service_tiers must be a non-empty array of {', '.join(map(repr, TIERS))}")
            tiers = tuple(dict.fromkeys(value))
        name = table.get("name", key_id(key)[:12])
        if not isinstance(name, str) or not name:
            raise ValueError(f"{at}: 'name' must be a non-empty string")
        out.append(KeyLimits(key=key, name=name, service_tiers=tiers, **limits))
    seen: set[str] = set()
    for limits in out:
        if limits.key in seen:
            raise ValueError(f"{where}: the key named {limits.name!r} is given twice in [[keys]]")
        seen.add(limits.key)
    return out


def requestable_tiers() -> Sequence[str]:
    """What ``service_tier`` may be in a request."""
    return _REQUESTABLE
