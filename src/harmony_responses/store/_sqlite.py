"""The SQLite store (the default): one file in the data directory, WAL mode, stdlib ``sqlite3`` in threads.

Why threads and not aiosqlite: aiosqlite is the same thing (a thread per connection) behind a queue; two
small executors say it more plainly. All writes go through one thread with one connection, because
SQLite has one writer at a time anyway and a single writer never waits on itself; reads use a second
pool of threads with their own connections, which WAL lets run while a write is in progress. The
``sqlite3`` module releases the GIL while SQLite works, so a batch insert overlaps the event loop.

``synchronous=NORMAL`` in WAL mode: a commit survives the process being killed (the case recovery
handles); only an operating-system crash can lose the last commits. ``busy_timeout`` lets several
processes share one file (each takes the write lock in turn).

A store file deleted (or replaced) under a running server took every write into the unlinked file without an
error, all of it gone at the next start: the file's identity is checked before each write (``_check_file``),
and once it is not the file opened, writes are refused (``StoreUnavailable``, a 503) and that is logged once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson

from ._base import (
    RESPONSE_COLUMNS,
    ActiveResponse,
    ConversationRecord,
    ItemKind,
    Op,
    Page,
    ProcessInfo,
    Rows,
    Store,
    StoredResponse,
    StoreError,
    StoreUnavailable,
    item_rows,
    split_chunks,
)
from ._migrations import LATEST, SQLITE
from ._sqlite_vec import Loader, sqlite_vec_loader

__all__ = ["SQLiteStore"]

T = TypeVar("T")

logger = logging.getLogger("harmony_responses.store")

DB_FILE = "responses.sqlite3"
BUSY_TIMEOUT_MS = 10_000
READ_THREADS = 2


def _response(row: tuple[Any, ...]) -> StoredResponse:
    return StoredResponse(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        status=row[3],
        background=bool(row[4]),
        previous_response_id=row[5],
        conversation_id=row[6],
        process_id=row[7],
        cancel_requested=bool(row[8]),
        response=bytes(row[9]),
        request_id=row[10],
    )


def _insert_rows(conn: sqlite3.Connection, head: str, rows: Sequence[tuple[Any, ...]], tail: str = "") -> None:
    """``head VALUES (…), (…), … tail``: many rows in as few statements as SQLite's variable limit allows.

    Why not ``executemany``: it steps once per row, and the sqlite3 module releases the GIL for each step
    and must take it back afterwards. In the writer's thread, with the event loop busy, every retake
    waits up to the interpreter's switch interval (5 ms), so a round of 60 rows took 100 ms instead of 10
    and the streams waiting for it stalled. One statement is one step.
    """
    if not rows:
        return
    width = len(rows[0])
    per_statement = max(1, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width)
    group = "(" + ",".join("?" * width) + ")"
    for at in range(0, len(rows), per_statement):
        chunk = rows[at : at + per_statement]
        conn.execute(f"{head} VALUES {','.join([group] * len(chunk))} {tail}", [v for row in chunk for v in row])


def _held(conn: sqlite3.Connection, ids: set[str], holder: str) -> set[str]:
    """Which of ``ids`` the process ``holder`` holds."""
    listed = list(ids)
    per_statement = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) - 1
    held: set[str] = set()
    for at in range(0, len(listed), per_statement):
        chunk = listed[at : at + per_statement]
        sql = f"SELECT id FROM responses WHERE process_id = ? AND id IN ({','.join('?' * len(chunk))})"
        held.update(row[0] for row in conn.execute(sql, (holder, *chunk)))
    return held


def set_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL, waiting out another process switching it at the same moment.

    Two processes opening a new store at once (``serve --workers 2`` on a fresh file, two gateways) both ask
    for WAL, which needs the file to themselves; SQLite answers one of them "database is locked" at once,
    without calling the busy handler (it would deadlock), so ``busy_timeout`` does not cover it: one worker
    in eight failed to start so. The switch is retried here for as long as ``busy_timeout`` would wait.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY  # an extended code too
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class SQLiteStore(Store):
    """A store in the SQLite file ``path`` (its directory is created on first start)."""

    kind = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._writer: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._identity: tuple[int, int] | None = None  # the file's (st_dev, st_ino) once open
        self._gone: str | None = None  # why writes are refused for good: the file at path is not ours
        # sqlite-vec in every connection (``use_vectors``, before ``open``): file_search's vector search.
        self._load_vectors: Loader | None = None
        self.vectors: str | None = None  # "sqlite-vec vX" once loaded
        self.no_vectors: str | None = None  # why vectors were asked for and cannot be had

    def describe(self) -> str:
        return f"sqlite {self.path}"

    def use_vectors(self) -> None:
        """Load sqlite-vec into every connection opened from now on (call before ``open``); ``vectors`` names
        it when that works, else ``no_vectors`` says why."""
        loader, found = sqlite_vec_loader()
        if loader is None:
            self.no_vectors = found
        else:
            self._load_vectors, self.vectors = loader, found

    # ------------------------------------------------------------------ connections

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every write says BEGIN and COMMIT itself.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA synchronous = NORMAL")
        if self._load_vectors is not None:
            self._load_vectors(conn)
        with self._lock:
            self._connections.append(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    async def _write_call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        assert self._writer is not None, "open() first"

        def call() -> T:
            self._check_file()
            return fn(self._conn())

        try:
            return await asyncio.get_running_loop().run_in_executor(self._writer, call)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite: {exc}") from exc

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        assert self._readers is not None, "open() first"
        try:
            return await asyncio.get_running_loop().run_in_executor(self._readers, lambda: fn(self._conn()))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite: {exc}") from exc

    def _check_file(self) -> None:
        """Refuse to write into a file that is no longer the one at ``path``: deleted (the open connections
        go on writing into the unlinked inode without an error, and a restart finds nothing) or replaced.
        Checked before every write, the heartbeat's every two seconds included (``run/stored.py``)."""
        if self._gone is None and self._identity is not None:
            try:
                found = os.stat(self.path)
                same = (found.st_dev, found.st_ino) == self._identity
            except OSError:
                same = False
            if not same:
                self._gone = "its file was deleted or replaced while the server ran"
                logger.error(
                    "the SQLite store %s: %s; writes are refused from now on, since they would be lost (restart "
                    "the server to open a store there again)",
                    self.path,
                    self._gone,
                )
        if self._gone is not None:
            raise StoreUnavailable(f"SQLite: {self._gone}")

    async def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the data directory {self.path.parent}: {exc}") from exc
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="store-sqlite-write")
        self._readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="store-sqlite-read")
        try:
            await self._write_call(self._migrate)
            found = os.stat(self.path)
        except (StoreUnavailable, OSError) as exc:
            await self.aclose()
            raise StoreError(f"cannot open the SQLite store {self.path}: {exc.__cause__ or exc}") from exc
        self._identity = found.st_dev, found.st_ino

    def _migrate(self, conn: sqlite3.Connection) -> None:
        set_wal(conn)
        conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait here and then see it done
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)")
            (current,) = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
            if current > LATEST:
                raise StoreError(
                    f"the SQLite store {self.path} has schema version {current}, newer than this server's "
                    f"{LATEST}: upgrade harmony-responses or use another --data-dir"
                )
            for version, statements in SQLITE:
                if version > current:
                    for statement in statements:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def aclose(self) -> None:
        for pool in (self._writer, self._readers):
            if pool is not None:
                pool.shutdown(wait=True)
        self._writer = self._readers = None
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    # ------------------------------------------------------------------ writes

    async def write(self, ops: Sequence[Op], *, holder: str | None = None) -> None:
        # The rows are built here, not in the writer's thread: Python work there holds the GIL in
        # switch-interval slices against the event loop; SQLite itself runs without it.
        rows = Rows.of(ops)
        await self._write_call(lambda conn: self._write(conn, rows, holder))

    def _write(self, conn: sqlite3.Connection, rows: Rows, holder: str | None) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _insert_rows(conn, f"INSERT INTO responses ({RESPONSE_COLUMNS}, updated_at)", rows.responses)
            if holder is not None:
                # Under the write lock, which a claim (another process's recovery) needs too.
                rows.held(_held(conn, rows.response_ids(), holder))
            if rows.updates:
                _insert_rows(
                    conn,
                    "WITH u(status, response, updated_at, finished, id) AS (",
                    rows.updates,
                    ") UPDATE responses SET status = u.status, response = u.response, updated_at = u.updated_at, "
                    "process_id = CASE WHEN u.finished THEN NULL ELSE process_id END FROM u WHERE responses.id = u.id",
                )
            # OR IGNORE: a batch retried after an ambiguous failure must not fail on what did commit.
            _insert_rows(conn, "INSERT OR IGNORE INTO events (response_id, seq, last_seq, data)", rows.events)
            _insert_rows(conn, "INSERT OR REPLACE INTO traces (response_id, data)", rows.traces)
            items = rows.items
            _insert_rows(
                conn,
                "INSERT INTO conversations (id, owner, created_at, updated_at, metadata, next_position)",
                rows.conversations,
            )
            for add in rows.appends:
                row = conn.execute(
                    "UPDATE conversations SET next_position = next_position + ?, updated_at = ? "
                    "WHERE id = ? RETURNING next_position",
                    (len(add.items), time.time(), add.parent),
                ).fetchone()
                if row is not None:  # None: the conversation was deleted meanwhile
                    start = row[0] - len(add.items)
                    items += item_rows(add.parent, add.kind, add.owner, add.created_at, start, add.items)
            if items:
                # Number the rows in the order they are stored (find_item's order), under the write lock.
                (last,) = conn.execute(
                    "UPDATE sequences SET value = value + ? WHERE name = 'items' RETURNING value", (len(items),)
                ).fetchone()
                first = last - len(items) + 1
                numbered = [(*row, first + i) for i, row in enumerate(items)]
                _insert_rows(
                    conn, "INSERT INTO items (parent, kind, position, id, owner, created_at, data, stored)", numbered
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _transaction(self, conn: sqlite3.Connection, statements: Sequence[tuple[str, tuple[Any, ...]]]) -> int:
        """Run statements in one write transaction; returns the first statement's row count."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            counts = [conn.execute(sql, params).rowcount for sql, params in statements]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return counts[0]

    # ------------------------------------------------------------------ processes and recovery

    async def register_process(self, process: ProcessInfo) -> None:
        now = time.time()
        await self._write_call(
            lambda conn: self._transaction(
                conn,
                [
                    (
                        "INSERT INTO processes (id, host, pid, started_at, heartbeat_at, pid_start) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (process.id, process.host, process.pid, now, now, process.pid_start),
                    )
                ],
            )
        )

    async def heartbeat(self, process_id: str) -> None:
        sql = "UPDATE processes SET heartbeat_at = ? WHERE id = ?"
        await self._write_call(lambda conn: self._transaction(conn, [(sql, (time.time(), process_id))]))

    async def unregister_process(self, process_id: str) -> None:
        sql = "DELETE FROM processes WHERE id = ?"
        await self._write_call(lambda conn: self._transaction(conn, [(sql, (process_id,))]))

    async def active_responses(self) -> list[ActiveResponse]:
        def query(conn: sqlite3.Connection) -> list[ActiveResponse]:
            # No heartbeat_age: each process wrote its own wall clock, and clocks step (stored.py measures instead
            # how long a heartbeat has not changed, by its own monotonic clock).
            rows = conn.execute(
                "SELECT r.id, r.process_id, p.host, p.pid, p.pid_start, p.heartbeat_at FROM responses r "
                "LEFT JOIN processes p ON p.id = r.process_id WHERE r.status IN ('queued', 'in_progress')",
            ).fetchall()
            return [
                ActiveResponse(id=r[0], process_id=r[1], host=r[2], pid=r[3], pid_start=r[4], heartbeat=r[5])
                for r in rows
            ]

        return await self._read(query)

    async def claim(self, response_id: str, *, holder: str | None, new_holder: str) -> bool:
        sql = (
            "UPDATE responses SET process_id = ? WHERE id = ? AND process_id IS ? "
            "AND status IN ('queued', 'in_progress')"
        )
        count = await self._write_call(lambda conn: self._transaction(conn, [(sql, (new_holder, response_id, holder))]))
        return count == 1

    async def forget_processes(self, max_age: float) -> None:
        sql = (
            "DELETE FROM processes WHERE ? - heartbeat_at > ? AND id NOT IN "
            "(SELECT process_id FROM responses WHERE process_id IS NOT NULL)"
        )
        await self._write_call(lambda conn: self._transaction(conn, [(sql, (time.time(), max_age))]))

    # ------------------------------------------------------------------ responses

    async def get_response(self, response_id: str, owner: str | None) -> StoredResponse | None:
        def query(conn: sqlite3.Connection) -> StoredResponse | None:
            row = conn.execute(f"SELECT {RESPONSE_COLUMNS} FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None or (owner is not None and row[1] != owner):
                return None
            return _response(row)

        return await self._read(query)

    async def delete_response(self, response_id: str, owner: str) -> bool:
        statements = [
            ("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner)),
            (
                "DELETE FROM events WHERE response_id = ? AND NOT EXISTS (SELECT 1 FROM responses WHERE id = ?)",
                (response_id, response_id),
            ),
            (
                "DELETE FROM items WHERE parent = ? AND kind IN ('input', 'output') "
                "AND NOT EXISTS (SELECT 1 FROM responses WHERE id = ?)",
                (response_id, response_id),
            ),
            (
                "DELETE FROM traces WHERE response_id = ? AND NOT EXISTS (SELECT 1 FROM responses WHERE id = ?)",
                (response_id, response_id),
            ),
        ]
        return await self._write_call(lambda conn: self._transaction(conn, statements)) == 1

    async def request_cancel(self, response_id: str) -> None:
        sql = "UPDATE responses SET cancel_requested = 1 WHERE id = ?"
        await self._write_call(lambda conn: self._transaction(conn, [(sql, (response_id,))]))

    async def cancel_requests(self, response_ids: Sequence[str]) -> list[str]:
        if not response_ids:
            return []
        marks = ",".join("?" * len(response_ids))
        sql = f"SELECT id FROM responses WHERE cancel_requested = 1 AND id IN ({marks})"
        return await self._read(lambda conn: [row[0] for row in conn.execute(sql, tuple(response_ids))])

    async def get_trace(self, response_id: str, owner: str) -> bytes | None:
        sql = (
            "SELECT t.data FROM traces t JOIN responses r ON r.id = t.response_id "
            "WHERE t.response_id = ? AND r.owner = ?"
        )
        row = await self._read(lambda conn: conn.execute(sql, (response_id, owner)).fetchone())
        return bytes(row[0]) if row is not None else None

    async def read_events(self, response_id: str, *, after: int, limit: int) -> list[tuple[int, bytes]]:
        sql = "SELECT seq, data FROM events WHERE response_id = ? AND last_seq > ? ORDER BY seq LIMIT ?"
        rows = await self._read(lambda conn: conn.execute(sql, (response_id, after, limit)).fetchall())
        return split_chunks(rows, after)

    async def chain_items(self, response_id: str, owner: str) -> list[dict[str, Any]] | None:
        sql = """
            WITH RECURSIVE chain(id, prev, depth) AS (
                SELECT id, previous_response_id, 0 FROM responses WHERE id = ? AND owner = ?
                UNION ALL
                SELECT r.id, r.previous_response_id, chain.depth + 1
                FROM responses r JOIN chain ON r.id = chain.prev WHERE r.owner = ?
            )
            SELECT chain.depth, items.data FROM chain
            LEFT JOIN items ON items.parent = chain.id AND items.kind IN ('input', 'output')
            ORDER BY chain.depth DESC, items.kind, items.position
        """

        def query(conn: sqlite3.Connection) -> list[dict[str, Any]] | None:
            rows = conn.execute(sql, (response_id, owner, owner)).fetchall()
            if not rows:
                return None
            return [orjson.loads(data) for _, data in rows if data is not None]

        return await self._read(query)

    # ------------------------------------------------------------------ items

    async def list_items(
        self, parent: str, kind: ItemKind, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> Page | None:
        def query(conn: sqlite3.Connection) -> Page | None:
            if after is None:
                bound = -1 if order == "asc" else 1 << 62
            else:
                row = conn.execute(
                    "SELECT position FROM items WHERE parent = ? AND kind = ? AND id = ? ORDER BY position LIMIT 1",
                    (parent, kind, after),
                ).fetchone()
                if row is None:
                    return None
                bound = row[0]
            if order == "asc":
                sql = "SELECT data FROM items WHERE parent = ? AND kind = ? AND position > ? ORDER BY position LIMIT ?"
            else:
                sql = (
                    "SELECT data FROM items WHERE parent = ? AND kind = ? AND position < ? "
                    "ORDER BY position DESC LIMIT ?"
                )
            rows = conn.execute(sql, (parent, kind, bound, limit + 1)).fetchall()
            return Page([orjson.loads(r[0]) for r in rows[:limit]], len(rows) > limit)

        return await self._read(query)

    async def all_items(self, parent: str, kind: ItemKind) -> list[dict[str, Any]]:
        sql = "SELECT data FROM items WHERE parent = ? AND kind = ? ORDER BY position"
        return await self._read(lambda conn: [orjson.loads(r[0]) for r in conn.execute(sql, (parent, kind))])

    async def get_item(self, parent: str, kind: ItemKind, item_id: str) -> dict[str, Any] | None:
        sql = "SELECT data FROM items WHERE parent = ? AND kind = ? AND id = ? ORDER BY position LIMIT 1"
        row = await self._read(lambda conn: conn.execute(sql, (parent, kind, item_id)).fetchone())
        return None if row is None else orjson.loads(row[0])

    async def delete_item(self, parent: str, kind: ItemKind, item_id: str) -> bool:
        sql = "DELETE FROM items WHERE parent = ? AND kind = ? AND id = ?"
        return await self._write_call(lambda conn: self._transaction(conn, [(sql, (parent, kind, item_id))])) > 0

    async def find_item(self, item_id: str, owner: str) -> dict[str, Any] | None:
        # NULL (rows stored before migration 3) sorts first: they are older than every numbered row.
        sql = "SELECT data FROM items WHERE id = ? AND owner = ? ORDER BY stored, created_at LIMIT 1"
        row = await self._read(lambda conn: conn.execute(sql, (item_id, owner)).fetchone())
        return None if row is None else orjson.loads(row[0])

    async def shared_secret(self, name: str, new: str) -> str:
        def get_or_put(conn: sqlite3.Connection) -> str:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT OR IGNORE INTO secrets VALUES (?, ?, ?)", (name, new, time.time()))
                (value,) = conn.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return value

        return await self._write_call(get_or_put)

    # ------------------------------------------------------------------ conversations

    async def get_conversation(self, conversation_id: str, owner: str) -> ConversationRecord | None:
        sql = "SELECT id, owner, created_at, metadata FROM conversations WHERE id = ? AND owner = ?"
        row = await self._read(lambda conn: conn.execute(sql, (conversation_id, owner)).fetchone())
        if row is None:
            return None
        return ConversationRecord(id=row[0], owner=row[1], created_at=row[2], metadata=orjson.loads(row[3]))

    async def update_conversation(
        self, conversation_id: str, owner: str, metadata: dict[str, Any], updated_at: float
    ) -> ConversationRecord | None:
        sql = "UPDATE conversations SET metadata = ?, updated_at = ? WHERE id = ? AND owner = ?"
        params = (orjson.dumps(metadata), updated_at, conversation_id, owner)
        await self._write_call(lambda conn: self._transaction(conn, [(sql, params)]))
        return await self.get_conversation(conversation_id, owner)

    async def delete_conversation(self, conversation_id: str, owner: str) -> bool:
        statements = [
            ("DELETE FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner)),
            (
                "DELETE FROM items WHERE parent = ? AND kind = 'conversation' "
                "AND NOT EXISTS (SELECT 1 FROM conversations WHERE id = ?)",
                (conversation_id, conversation_id),
            ),
        ]
        return await self._write_call(lambda conn: self._transaction(conn, statements)) == 1

    # ------------------------------------------------------------------ retention

    async def purge(self, before: float) -> int:
        old = "SELECT id FROM responses WHERE created_at < ? AND status NOT IN ('queued', 'in_progress')"
        stale = "SELECT id FROM conversations WHERE updated_at < ?"

        def run(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(f"DELETE FROM events WHERE response_id IN ({old})", (before,))
                conn.execute(f"DELETE FROM items WHERE kind IN ('input', 'output') AND parent IN ({old})", (before,))
                conn.execute(f"DELETE FROM traces WHERE response_id IN ({old})", (before,))
                responses = conn.execute(
                    "DELETE FROM responses WHERE created_at < ? AND status NOT IN ('queued', 'in_progress')", (before,)
                ).rowcount
                conn.execute(f"DELETE FROM items WHERE kind = 'conversation' AND parent IN ({stale})", (before,))
                conversations = conn.execute("DELETE FROM conversations WHERE updated_at < ?", (before,)).rowcount
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return responses + conversations

        return await self._write_call(run)
