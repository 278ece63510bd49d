"""The PostgreSQL store (``--store postgresql://…``): several server processes share one database.

Driver: asyncpg (pip ``harmony-responses[postgres]``). It speaks the binary protocol natively and
pipelines ``executemany``, which is what batched event-log writes need; psycopg 3 would do too, but
asyncpg needs no connection-pool package beside it. Any query parameter of the URL that asyncpg does not
know is a server setting, so ``?search_path=myschema`` puts the tables in a schema of your choice.

Time for leases comes from the database (``clock_timestamp()``), so processes on hosts whose clocks
disagree still agree on whose heartbeat is stale. Migrations run under an advisory lock, so that
processes starting together do not race to create the tables.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

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
from ._migrations import LATEST, POSTGRES

__all__ = ["PostgresStore"]

# Any constant works; it only has to be the same in every process of this application.
MIGRATION_LOCK = 0x48524553  # "HRES"
POOL_MAX = 10
NOW = "extract(epoch from clock_timestamp())"


def _response(row: Any) -> StoredResponse:
    return StoredResponse(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        status=row[3],
        background=row[4],
        previous_response_id=row[5],
        conversation_id=row[6],
        process_id=row[7],
        cancel_requested=row[8],
        response=bytes(row[9]),
        request_id=row[10],
    )


def _redacted(url: str) -> str:
    """The URL without its password, for the banner and error messages."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


class _Guarded:
    """The asyncpg pool as the store uses it, its driver's failures (and a database that cannot be reached)
    raised as ``StoreUnavailable``: a request they fail is a 503, not a bug's 500."""

    def __init__(self, pool: Any, failures: tuple[type[BaseException], ...]) -> None:
        self._pool = pool
        self._failures = failures

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self._pool, method)(*args)
        except self._failures as exc:
            raise StoreUnavailable(f"PostgreSQL: {exc}") from exc

    async def execute(self, *args: Any) -> Any:
        return await self._call("execute", *args)

    async def fetch(self, *args: Any) -> Any:
        return await self._call("fetch", *args)

    async def fetchrow(self, *args: Any) -> Any:
        return await self._call("fetchrow", *args)

    async def fetchval(self, *args: Any) -> Any:
        return await self._call("fetchval", *args)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except self._failures as exc:
            raise StoreUnavailable(f"PostgreSQL: {exc}") from exc

    async def close(self) -> None:
        await self._pool.close()


class PostgresStore(Store):
    """A store in the PostgreSQL database at ``url``."""

    kind = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: Any = None
        self._want_vectors = False  # ``use_vectors``: pgvector looked for (and created) at ``open``
        self.vectors: str | None = None  # "pgvector X" when the extension is there
        self.vector_schema = "public"  # the schema pgvector's type and operators were created in
        self.no_vectors: str | None = None  # why vectors were asked for and cannot be had

    def describe(self) -> str:
        return f"postgresql {_redacted(self.url)}"

    def use_vectors(self) -> None:
        """At ``open``, make sure of the pgvector extension (``CREATE EXTENSION IF NOT EXISTS vector``, which
        needs the package on the database's host and the right to create it): ``vectors`` names it when it is
        there, else ``no_vectors`` says why, and file_search ranks by full text only."""
        self._want_vectors = True

    async def _find_vectors(self, conn: Any) -> None:
        import asyncpg

        try:
            async with conn.transaction():
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except asyncpg.PostgresError as exc:
            created = f"CREATE EXTENSION vector failed: {exc}"
        else:
            created = ""
        found = await conn.fetchrow(
            "SELECT e.extversion, n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'vector'"
        )
        if found is not None:
            self.vectors = f"pgvector {found[0]}"
            self.vector_schema = found[1]
        else:
            self.no_vectors = f"PostgreSQL has no pgvector extension ({created or 'not installed'})"

    async def open(self) -> None:
        try:
            import asyncpg
        except ImportError as exc:  # pragma: no cover - an installation problem
            raise StoreError("the PostgreSQL store needs asyncpg: pip install 'harmony-responses[postgres]'") from exc
        try:
            self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=POOL_MAX)
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                    "applied_at DOUBLE PRECISION)"
                )
                current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")
                if current > LATEST:
                    raise StoreError(
                        f"the PostgreSQL store {_redacted(self.url)} has schema version {current}, newer than this "
                        f"server's {LATEST}: upgrade harmony-responses"
                    )
                for version, statements in POSTGRES:
                    if version > current:
                        for statement in statements:
                            await conn.execute(statement)
                        await conn.execute("INSERT INTO schema_migrations VALUES ($1, $2)", version, time.time())
            if self._want_vectors:
                async with self._pool.acquire() as conn:
                    await self._find_vectors(conn)
        except StoreError:
            await self.aclose()
            raise
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await self.aclose()
            raise StoreError(f"cannot open the PostgreSQL store {_redacted(self.url)}: {exc}") from exc
        self._pool = _Guarded(self._pool, (OSError, asyncpg.PostgresError, asyncpg.InterfaceError))

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # ------------------------------------------------------------------ writes

    async def write(self, ops: Sequence[Op], *, holder: str | None = None) -> None:
        rows = Rows.of(ops)  # one pipelined executemany per kind of row: a round trip each, not one per op
        async with self._pool.acquire() as conn, conn.transaction():
            if rows.responses:
                await conn.executemany(
                    f"INSERT INTO responses ({RESPONSE_COLUMNS}, updated_at) "
                    "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)",
                    rows.responses,
                )
            if holder is not None and (ids := rows.response_ids()):
                # The row locks order this write and a claim (another process's recovery): whichever is
                # second sees what the first committed.
                held = await conn.fetch(
                    "SELECT id FROM responses WHERE id = ANY($1::text[]) AND process_id = $2 FOR NO KEY UPDATE",
                    list(ids),
                    holder,
                )
                rows.held({row[0] for row in held})
            if rows.updates:
                await conn.executemany(
                    "UPDATE responses SET status = $1, response = $2, updated_at = $3, "
                    "process_id = CASE WHEN $4 THEN NULL ELSE process_id END WHERE id = $5",
                    rows.updates,
                )
            if rows.events:
                # ON CONFLICT: a batch retried after an ambiguous failure must not fail on what did commit.
                await conn.executemany(
                    "INSERT INTO events (response_id, seq, last_seq, data) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT DO NOTHING",
                    rows.events,
                )
            if rows.traces:
                await conn.executemany(
                    "INSERT INTO traces (response_id, data) VALUES ($1, $2) "
                    "ON CONFLICT (response_id) DO UPDATE SET data = EXCLUDED.data",
                    rows.traces,
                )
            items = rows.items
            if rows.conversations:
                await conn.executemany(
                    "INSERT INTO conversations (id, owner, created_at, updated_at, metadata, next_position) "
                    "VALUES ($1,$2,$3,$4,$5,$6)",
                    rows.conversations,
                )
            for add in rows.appends:
                # The row lock this UPDATE takes orders concurrent appends to one conversation.
                next_position = await conn.fetchval(
                    f"UPDATE conversations SET next_position = next_position + $1, updated_at = {NOW} "
                    "WHERE id = $2 RETURNING next_position",
                    len(add.items),
                    add.parent,
                )
                if next_position is not None:  # None: the conversation was deleted meanwhile
                    start = next_position - len(add.items)
                    items += item_rows(add.parent, add.kind, add.owner, add.created_at, start, add.items)
            if items:
                await conn.executemany(
                    "INSERT INTO items (parent, kind, position, id, owner, created_at, data) "
                    "VALUES ($1,$2,$3,$4,$5,$6,$7)",
                    items,
                )

    # ------------------------------------------------------------------ processes and recovery

    async def register_process(self, process: ProcessInfo) -> None:
        await self._pool.execute(
            f"INSERT INTO processes (id, host, pid, started_at, heartbeat_at, pid_start) "
            f"VALUES ($1, $2, $3, {NOW}, {NOW}, $4)",
            process.id,
            process.host,
            process.pid,
            process.pid_start,
        )

    async def heartbeat(self, process_id: str) -> None:
        await self._pool.execute(f"UPDATE processes SET heartbeat_at = {NOW} WHERE id = $1", process_id)

    async def unregister_process(self, process_id: str) -> None:
        await self._pool.execute("DELETE FROM processes WHERE id = $1", process_id)

    async def active_responses(self) -> list[ActiveResponse]:
        rows = await self._pool.fetch(
            f"SELECT r.id, r.process_id, p.host, p.pid, p.pid_start, p.heartbeat_at, {NOW} - p.heartbeat_at "
            "FROM responses r LEFT JOIN processes p ON p.id = r.process_id "
            "WHERE r.status IN ('queued', 'in_progress')"
        )
        return [
            ActiveResponse(
                id=r[0], process_id=r[1], host=r[2], pid=r[3], pid_start=r[4], heartbeat=r[5], heartbeat_age=r[6]
            )
            for r in rows
        ]

    async def claim(self, response_id: str, *, holder: str | None, new_holder: str) -> bool:
        status = await self._pool.execute(
            "UPDATE responses SET process_id = $1 WHERE id = $2 AND process_id IS NOT DISTINCT FROM $3 "
            "AND status IN ('queued', 'in_progress')",
            new_holder,
            response_id,
            holder,
        )
        return status == "UPDATE 1"

    async def forget_processes(self, max_age: float) -> None:
        await self._pool.execute(
            f"DELETE FROM processes WHERE {NOW} - heartbeat_at > $1 AND id NOT IN "
            "(SELECT process_id FROM responses WHERE process_id IS NOT NULL)",
            max_age,
        )

    # ------------------------------------------------------------------ responses

    async def get_response(self, response_id: str, owner: str | None) -> StoredResponse | None:
        row = await self._pool.fetchrow(f"SELECT {RESPONSE_COLUMNS} FROM responses WHERE id = $1", response_id)
        if row is None or (owner is not None and row[1] != owner):
            return None
        return _response(row)

    async def delete_response(self, response_id: str, owner: str) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute("DELETE FROM responses WHERE id = $1 AND owner = $2", response_id, owner)
            if status != "DELETE 1":
                return False
            await conn.execute("DELETE FROM events WHERE response_id = $1", response_id)
            await conn.execute("DELETE FROM items WHERE parent = $1 AND kind IN ('input', 'output')", response_id)
            await conn.execute("DELETE FROM traces WHERE response_id = $1", response_id)
            return True

    async def request_cancel(self, response_id: str) -> None:
        await self._pool.execute("UPDATE responses SET cancel_requested = TRUE WHERE id = $1", response_id)

    async def cancel_requests(self, response_ids: Sequence[str]) -> list[str]:
        if not response_ids:
            return []
        rows = await self._pool.fetch(
            "SELECT id FROM responses WHERE cancel_requested AND id = ANY($1::text[])", list(response_ids)
        )
        return [row[0] for row in rows]

    async def get_trace(self, response_id: str, owner: str) -> bytes | None:
        data = await self._pool.fetchval(
            "SELECT t.data FROM traces t JOIN responses r ON r.id = t.response_id "
            "WHERE t.response_id = $1 AND r.owner = $2",
            response_id,
            owner,
        )
        return bytes(data) if data is not None else None

    async def read_events(self, response_id: str, *, after: int, limit: int) -> list[tuple[int, bytes]]:
        rows = await self._pool.fetch(
            "SELECT seq, data FROM events WHERE response_id = $1 AND last_seq > $2 ORDER BY seq LIMIT $3",
            response_id,
            after,
            limit,
        )
        return split_chunks(rows, after)

    async def chain_items(self, response_id: str, owner: str) -> list[dict[str, Any]] | None:
        rows = await self._pool.fetch(
            """
            WITH RECURSIVE chain(id, prev, depth) AS (
                SELECT id, previous_response_id, 0 FROM responses WHERE id = $1 AND owner = $2
                UNION ALL
                SELECT r.id, r.previous_response_id, chain.depth + 1
                FROM responses r JOIN chain ON r.id = chain.prev WHERE r.owner = $2
            )
            SELECT chain.depth, items.data FROM chain
            LEFT JOIN items ON items.parent = chain.id AND items.kind IN ('input', 'output')
            ORDER BY chain.depth DESC, items.kind, items.position
            """,
            response_id,
            owner,
        )
        if not rows:
            return None
        return [orjson.loads(row[1]) for row in rows if row[1] is not None]

    # ------------------------------------------------------------------ items

    async def list_items(
        self, parent: str, kind: ItemKind, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> Page | None:
        if after is None:
            bound = -1 if order == "asc" else 1 << 30
        else:
            bound = await self._pool.fetchval(
                "SELECT position FROM items WHERE parent = $1 AND kind = $2 AND id = $3 ORDER BY position LIMIT 1",
                parent,
                kind,
                after,
            )
            if bound is None:
                return None
        if order == "asc":
            sql = "SELECT data FROM items WHERE parent = $1 AND kind = $2 AND position > $3 ORDER BY position LIMIT $4"
        else:
            sql = (
                "SELECT data FROM items WHERE parent = $1 AND kind = $2 AND position < $3 "
                "ORDER BY position DESC LIMIT $4"
            )
        rows = await self._pool.fetch(sql, parent, kind, bound, limit + 1)
        return Page([orjson.loads(row[0]) for row in rows[:limit]], len(rows) > limit)

    async def all_items(self, parent: str, kind: ItemKind) -> list[dict[str, Any]]:
        rows = await self._pool.fetch(
            "SELECT data FROM items WHERE parent = $1 AND kind = $2 ORDER BY position", parent, kind
        )
        return [orjson.loads(row[0]) for row in rows]

    async def get_item(self, parent: str, kind: ItemKind, item_id: str) -> dict[str, Any] | None:
        data = await self._pool.fetchval(
            "SELECT data FROM items WHERE parent = $1 AND kind = $2 AND id = $3 ORDER BY position LIMIT 1",
            parent,
            kind,
            item_id,
        )
        return None if data is None else orjson.loads(data)

    async def delete_item(self, parent: str, kind: ItemKind, item_id: str) -> bool:
        status = await self._pool.execute(
            "DELETE FROM items WHERE parent = $1 AND kind = $2 AND id = $3", parent, kind, item_id
        )
        return status != "DELETE 0"

    async def find_item(self, item_id: str, owner: str) -> dict[str, Any] | None:
        data = await self._pool.fetchval(
            "SELECT data FROM items WHERE id = $1 AND owner = $2 ORDER BY stored LIMIT 1", item_id, owner
        )
        return None if data is None else orjson.loads(data)

    async def shared_secret(self, name: str, new: str) -> str:
        # ON CONFLICT DO NOTHING then SELECT: of processes starting together, the first insert wins for all.
        await self._pool.execute(f"INSERT INTO secrets VALUES ($1, $2, {NOW}) ON CONFLICT (name) DO NOTHING", name, new)
        return await self._pool.fetchval("SELECT value FROM secrets WHERE name = $1", name)

    # ------------------------------------------------------------------ conversations

    async def get_conversation(self, conversation_id: str, owner: str) -> ConversationRecord | None:
        row = await self._pool.fetchrow(
            "SELECT id, owner, created_at, metadata FROM conversations WHERE id = $1 AND owner = $2",
            conversation_id,
            owner,
        )
        if row is None:
            return None
        return ConversationRecord(id=row[0], owner=row[1], created_at=row[2], metadata=orjson.loads(row[3]))

    async def update_conversation(
        self, conversation_id: str, owner: str, metadata: dict[str, Any], updated_at: float
    ) -> ConversationRecord | None:
        await self._pool.execute(
            "UPDATE conversations SET metadata = $1, updated_at = $2 WHERE id = $3 AND owner = $4",
            orjson.dumps(metadata),
            updated_at,
            conversation_id,
            owner,
        )
        return await self.get_conversation(conversation_id, owner)

    async def delete_conversation(self, conversation_id: str, owner: str) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                "DELETE FROM conversations WHERE id = $1 AND owner = $2", conversation_id, owner
            )
            if status != "DELETE 1":
                return False
            await conn.execute("DELETE FROM items WHERE parent = $1 AND kind = 'conversation'", conversation_id)
            return True

    # ------------------------------------------------------------------ retention

    async def purge(self, before: float) -> int:
        old = "SELECT id FROM responses WHERE created_at < $1 AND status NOT IN ('queued', 'in_progress')"
        created_before = int(before)  # created_at is whole seconds (BIGINT)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(f"DELETE FROM events WHERE response_id IN ({old})", created_before)
            await conn.execute(
                f"DELETE FROM items WHERE kind IN ('input', 'output') AND parent IN ({old})", created_before
            )
            await conn.execute(f"DELETE FROM traces WHERE response_id IN ({old})", created_before)
            responses = await conn.execute(
                "DELETE FROM responses WHERE created_at < $1 AND status NOT IN ('queued', 'in_progress')",
                created_before,
            )
            await conn.execute(
                "DELETE FROM items WHERE kind = 'conversation' AND parent IN "
                "(SELECT id FROM conversations WHERE updated_at < $1)",
                float(before),
            )
            conversations = await conn.execute("DELETE FROM conversations WHERE updated_at < $1", float(before))
        return int(responses.split()[-1]) + int(conversations.split()[-1])
