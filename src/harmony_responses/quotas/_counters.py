"""Where the quota counters live, so that every process of a server (``--workers``) and every gateway
sharing a PostgreSQL store counts against the same limits.

Two tables, the same in both databases:

- ``quota_buckets (key, kind, level, updated_at)``: a token bucket per key and kind (``requests``,
  ``tokens``). A bucket holds up to a minute's limit and refills continuously at limit/60 per second; a
  request takes 1 from ``requests``, tokens are taken from ``tokens`` as they are produced (its level
  may go below zero: a response already running is never cut), and a request is admitted only while
  both levels are at least 1.
- ``quota_slots (id, key, background, holder, expires_at)``: one row per response running now (its
  concurrency slot), held by a process (``holder``) that renews its rows' expiry while it lives; a
  process that died leaves rows that expire after ``SLOT_TTL``.

Both are created if missing (no migration: what they hold is minutes old at most, so a later version
may drop and recreate them). SQLite: a file of its own beside the store's (``quotas.sqlite3``), so that
the counters' short write transactions never queue behind the store's writes; PostgreSQL: the store's
database (and ``search_path``), with the database's clock (hosts whose clocks disagree still agree).
Every operation is one transaction (SQLite's ``BEGIN IMMEDIATE``; PostgreSQL takes a per-key advisory
lock), so concurrent processes never both take the last unit.
"""

from __future__ import annotations

import abc
import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..store import set_wal

__all__ = ["SLOT_TTL", "Counters", "Levels", "PostgresCounters", "SQLiteCounters", "SlotAsk", "refilled"]

T = TypeVar("T")

# A dead process's slots free themselves after this long; a live one renews its own every SLOT_TTL / 3.
SLOT_TTL = 60.0
DB_FILE = "quotas.sqlite3"

_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS quota_buckets (key TEXT NOT NULL, kind TEXT NOT NULL, level REAL NOT NULL, "
    "updated_at REAL NOT NULL, PRIMARY KEY (key, kind)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS quota_slots (id TEXT PRIMARY KEY, key TEXT NOT NULL, background INTEGER NOT NULL, "
    "holder TEXT NOT NULL, expires_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS quota_slots_key ON quota_slots (key)",
)
_POSTGRES_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS quota_buckets (key TEXT NOT NULL, kind TEXT NOT NULL, level DOUBLE PRECISION NOT "
    "NULL, updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (key, kind))",
    "CREATE TABLE IF NOT EXISTS quota_slots (id TEXT PRIMARY KEY, key TEXT NOT NULL, background BOOLEAN NOT NULL, "
    "holder TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS quota_slots_key ON quota_slots (key)",
)
# Any constant: the same in every process (the store's migration lock is another).
_SCHEMA_LOCK = 0x48525154  # "HRQT"


def refilled(level: float | None, updated_at: float, now: float, limit: int) -> float:
    """A bucket's level at ``now``: full when new (None), else refilled at limit/60 per second, at most full."""
    if level is None:
        return float(limit)
    return min(float(limit), level + max(0.0, now - updated_at) * limit / 60.0)


@dataclass(frozen=True, slots=True)
class Levels:
    """The buckets' levels after an admission (None: the key has no such limit), and what refused it."""

    requests: float | None
    tokens: float | None
    refused: str | None = None  # "requests" or "tokens"


@dataclass(frozen=True, slots=True)
class SlotAsk:
    """A concurrency slot to take with an admission, in its transaction (a response's, not in the background)."""

    id: str
    holder: str
    most: int


def _decide(requests: float | None, tokens: float | None) -> tuple[float | None, float | None, str | None]:
    if requests is not None and requests < 1:
        return requests, tokens, "requests"
    if tokens is not None and tokens < 1:
        return requests, tokens, "tokens"
    return (requests - 1 if requests is not None else None), tokens, None


class Counters(abc.ABC):
    """The counters' database. Every method is one transaction."""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    @abc.abstractmethod
    async def admit(self, key: str, rpm: int | None, tpm: int | None, slot: SlotAsk | None = None) -> Levels:
        """Take one request from ``key``'s requests bucket if both buckets allow it, and ``slot`` if given and
        free (``Levels.refused``: what did not allow it, ``requests``, ``tokens`` or ``max_concurrent``; then
        nothing is taken); the levels after."""

    @abc.abstractmethod
    async def levels(self, key: str, rpm: int | None, tpm: int | None) -> Levels:
        """The levels now, taking nothing."""

    @abc.abstractmethod
    async def charge(self, key: str, tpm: int, tokens: int) -> None:
        """Take ``tokens`` from ``key``'s tokens bucket (negative: give them back), whatever its level."""

    @abc.abstractmethod
    async def acquire(
        self, key: str, slot: str, holder: str, *, background: bool, most: int | None, most_background: int | None
    ) -> str | None:
        """Hold a concurrency slot; None, or what refused it (``max_concurrent``, ``max_concurrent_background``)."""

    @abc.abstractmethod
    async def release(self, slot: str) -> None: ...

    @abc.abstractmethod
    async def renew(self, holder: str) -> None:
        """Push back the expiry of ``holder``'s slots (it is alive)."""

    @abc.abstractmethod
    async def release_holder(self, holder: str) -> None:
        """Free every slot of ``holder`` (it stops)."""


def _slot_refusal(
    running: int, background: int, *, is_background: bool, most: int | None, most_bg: int | None
) -> str | None:
    if most is not None and running >= most:
        return "max_concurrent"
    if is_background and most_bg is not None and background >= most_bg:
        return "max_concurrent_background"
    return None


class SQLiteCounters(Counters):
    """The counters in the SQLite file ``path``, shared by the processes of one host."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None
        # Admissions asked for while one batch of them is in the thread: the next batch, one transaction.
        self._queued: list[tuple[tuple[Any, ...], asyncio.Future[Levels]]] = []
        self._admitting: asyncio.Task[None] | None = None  # the task running the batches

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._thread is not None, "open() first"
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 10000")
        set_wal(conn)  # the workers of a server open this file at the same moment
        conn.execute("PRAGMA synchronous = NORMAL")
        for statement in _SQLITE_SCHEMA:
            conn.execute(statement)
        self._conn = conn

    async def open(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="quotas")
        await self._run(self._open)

    async def aclose(self) -> None:
        if self._thread is not None:
            if self._conn is not None:
                await self._run(self._conn.close)
            self._thread.shutdown(wait=True)
            self._thread = None
            self._conn = None

    def _transaction(self, fn: Callable[[sqlite3.Connection, float], T]) -> T:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn, time.time())
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    @staticmethod
    def _level(conn: sqlite3.Connection, key: str, kind: str, limit: int, now: float) -> float:
        row = conn.execute(
            "SELECT level, updated_at FROM quota_buckets WHERE key = ? AND kind = ?", (key, kind)
        ).fetchone()
        return refilled(None if row is None else row[0], row[1] if row else now, now, limit)

    @staticmethod
    def _put(conn: sqlite3.Connection, key: str, kind: str, level: float, now: float) -> None:
        conn.execute(
            "INSERT INTO quota_buckets (key, kind, level, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (key, kind) DO UPDATE SET level = excluded.level, updated_at = excluded.updated_at",
            (key, kind, level, now),
        )

    def _levels(self, key: str, rpm: int | None, tpm: int | None, take: bool, slot: SlotAsk | None) -> Levels:
        return self._transaction(lambda conn, now: self._admit_in(conn, now, key, rpm, tpm, take, slot))

    def _admit_in(
        self,
        conn: sqlite3.Connection,
        now: float,
        key: str,
        rpm: int | None,
        tpm: int | None,
        take: bool,
        slot: SlotAsk | None,
    ) -> Levels:
        before = self._level(conn, key, "requests", rpm, now) if rpm is not None else None
        tokens = self._level(conn, key, "tokens", tpm, now) if tpm is not None else None
        if not take:
            return Levels(before, tokens)
        requests, tokens, refused = _decide(before, tokens)
        if refused is None and slot is not None:
            refused = self._slot(conn, now, key, slot.id, slot.holder, False, slot.most, None)
            if refused is not None:
                return Levels(before, tokens, refused)
        if refused is None and requests is not None:
            self._put(conn, key, "requests", requests, now)
        return Levels(requests, tokens, refused)

    async def admit(self, key: str, rpm: int | None, tpm: int | None, slot: SlotAsk | None = None) -> Levels:
        # A burst's admissions share transactions: while one batch is in the thread, the next ones queue, and
        # go in together (one thread hop and one commit for all, in arrival order), not one by one.
        future: asyncio.Future[Levels] = asyncio.get_running_loop().create_future()
        self._queued.append(((key, rpm, tpm, True, slot), future))
        if self._admitting is None:
            self._admitting = asyncio.get_running_loop().create_task(self._admit_queued())
        return await future

    async def _admit_queued(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    results = await self._run(self._admit_batch, [args for args, _ in batch])
                except Exception as exc:
                    for _, waiting in batch:
                        if not waiting.done():
                            waiting.set_exception(exc)
                    continue
                for (_, waiting), levels in zip(batch, results, strict=True):
                    if not waiting.done():
                        waiting.set_result(levels)
        finally:
            self._admitting = None

    def _admit_batch(self, batch: list[tuple[Any, ...]]) -> list[Levels]:
        return self._transaction(lambda conn, now: [self._admit_in(conn, now, *args) for args in batch])

    async def levels(self, key: str, rpm: int | None, tpm: int | None) -> Levels:
        return await self._run(self._levels, key, rpm, tpm, False, None)

    def _charge(self, key: str, tpm: int, tokens: int) -> None:
        def work(conn: sqlite3.Connection, now: float) -> None:
            self._put(conn, key, "tokens", self._level(conn, key, "tokens", tpm, now) - tokens, now)

        self._transaction(work)

    async def charge(self, key: str, tpm: int, tokens: int) -> None:
        await self._run(self._charge, key, tpm, tokens)

    def _acquire(
        self, key: str, slot: str, holder: str, background: bool, most: int | None, most_bg: int | None
    ) -> str | None:
        return self._transaction(lambda conn, now: self._slot(conn, now, key, slot, holder, background, most, most_bg))

    @staticmethod
    def _slot(
        conn: sqlite3.Connection,
        now: float,
        key: str,
        slot: str,
        holder: str,
        background: bool,
        most: int | None,
        most_bg: int | None,
    ) -> str | None:
        conn.execute("DELETE FROM quota_slots WHERE key = ? AND expires_at < ?", (key, now))
        running, in_background = conn.execute(
            "SELECT count(*), coalesce(sum(background), 0) FROM quota_slots WHERE key = ?", (key,)
        ).fetchone()
        refused = _slot_refusal(running, in_background, is_background=background, most=most, most_bg=most_bg)
        if refused is None:
            conn.execute(
                "INSERT INTO quota_slots (id, key, background, holder, expires_at) VALUES (?, ?, ?, ?, ?)",
                (slot, key, int(background), holder, now + SLOT_TTL),
            )
        return refused

    async def acquire(
        self, key: str, slot: str, holder: str, *, background: bool, most: int | None, most_background: int | None
    ) -> str | None:
        return await self._run(self._acquire, key, slot, holder, background, most, most_background)

    async def release(self, slot: str) -> None:
        await self._run(
            self._transaction, lambda conn, now: conn.execute("DELETE FROM quota_slots WHERE id = ?", (slot,))
        )

    async def renew(self, holder: str) -> None:
        await self._run(
            self._transaction,
            lambda conn, now: conn.execute(
                "UPDATE quota_slots SET expires_at = ? WHERE holder = ?", (now + SLOT_TTL, holder)
            ),
        )

    async def release_holder(self, holder: str) -> None:
        await self._run(
            self._transaction, lambda conn, now: conn.execute("DELETE FROM quota_slots WHERE holder = ?", (holder,))
        )


_NOW = "extract(epoch from clock_timestamp())::double precision"


class PostgresCounters(Counters):
    """The counters in the PostgreSQL database at ``url`` (the store's), shared by every gateway using it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: Any = None

    async def open(self) -> None:
        import asyncpg

        self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=4)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            for statement in _POSTGRES_SCHEMA:
                await conn.execute(statement)

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @staticmethod
    async def _level(conn: Any, key: str, kind: str, limit: int, now: float) -> float:
        row = await conn.fetchrow(
            "SELECT level, updated_at FROM quota_buckets WHERE key = $1 AND kind = $2 FOR UPDATE", key, kind
        )
        return refilled(None if row is None else row[0], row[1] if row else now, now, limit)

    @staticmethod
    async def _put(conn: Any, key: str, kind: str, level: float, now: float) -> None:
        await conn.execute(
            "INSERT INTO quota_buckets (key, kind, level, updated_at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (key, kind) DO UPDATE SET level = EXCLUDED.level, updated_at = EXCLUDED.updated_at",
            key,
            kind,
            level,
            now,
        )

    async def _levels(self, key: str, rpm: int | None, tpm: int | None, take: bool, slot: SlotAsk | None) -> Levels:
        async with self._pool.acquire() as conn, conn.transaction():
            # The key's lock: a bucket row not there yet cannot be locked FOR UPDATE.
            now = await conn.fetchval(f"SELECT {_NOW} FROM (SELECT pg_advisory_xact_lock(hashtext($1))) AS l", key)
            before = await self._level(conn, key, "requests", rpm, now) if rpm is not None else None
            tokens = await self._level(conn, key, "tokens", tpm, now) if tpm is not None else None
            if not take:
                return Levels(before, tokens)
            requests, tokens, refused = _decide(before, tokens)
            if refused is None and slot is not None:
                refused = await self._slot(conn, now, key, slot.id, slot.holder, False, slot.most, None)
                if refused is not None:
                    return Levels(before, tokens, refused)
            if refused is None and requests is not None:
                await self._put(conn, key, "requests", requests, now)
            return Levels(requests, tokens, refused)

    async def admit(self, key: str, rpm: int | None, tpm: int | None, slot: SlotAsk | None = None) -> Levels:
        return await self._levels(key, rpm, tpm, True, slot)

    async def levels(self, key: str, rpm: int | None, tpm: int | None) -> Levels:
        return await self._levels(key, rpm, tpm, False, None)

    async def charge(self, key: str, tpm: int, tokens: int) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            now = await conn.fetchval(f"SELECT {_NOW} FROM (SELECT pg_advisory_xact_lock(hashtext($1))) AS l", key)
            await self._put(conn, key, "tokens", await self._level(conn, key, "tokens", tpm, now) - tokens, now)

    async def acquire(
        self, key: str, slot: str, holder: str, *, background: bool, most: int | None, most_background: int | None
    ) -> str | None:
        async with self._pool.acquire() as conn, conn.transaction():
            now = await conn.fetchval(f"SELECT {_NOW} FROM (SELECT pg_advisory_xact_lock(hashtext($1))) AS l", key)
            return await self._slot(conn, now, key, slot, holder, background, most, most_background)

    @staticmethod
    async def _slot(
        conn: Any,
        now: float,
        key: str,
        slot: str,
        holder: str,
        background: bool,
        most: int | None,
        most_background: int | None,
    ) -> str | None:
        await conn.execute("DELETE FROM quota_slots WHERE key = $1 AND expires_at < $2", key, now)
        running, in_background = await conn.fetchrow(
            "SELECT count(*), count(*) FILTER (WHERE background) FROM quota_slots WHERE key = $1", key
        )
        refused = _slot_refusal(running, in_background, is_background=background, most=most, most_bg=most_background)
        if refused is None:
            await conn.execute(
                "INSERT INTO quota_slots (id, key, background, holder, expires_at) VALUES ($1, $2, $3, $4, $5)",
                slot,
                key,
                background,
                holder,
                now + SLOT_TTL,
            )
        return refused

    async def release(self, slot: str) -> None:
        await self._pool.execute("DELETE FROM quota_slots WHERE id = $1", slot)

    async def renew(self, holder: str) -> None:
        await self._pool.execute(f"UPDATE quota_slots SET expires_at = {_NOW} + $2 WHERE holder = $1", holder, SLOT_TTL)

    async def release_holder(self, holder: str) -> None:
        await self._pool.execute("DELETE FROM quota_slots WHERE holder = $1", holder)
