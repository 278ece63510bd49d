"""Vector stores (``tools/file_search``): their rows, their files' ingestion state, and the chunks searched.

Tables (``_migrations.py`` version 8): ``vector_stores`` (owner, name, metadata, expiry), ``vector_store_files``
(one row per file attached to a store: status ``in_progress`` → ``completed``/``failed`` with ``last_error``,
usage, chunking strategy, attributes, its batch, and the process ingesting it), ``vector_store_batches`` and
``chunks`` (each file's text in chunks, in order). Retrieval is full-text: SQLite's FTS5 (an external-content
table over ``chunks`` kept by triggers, ``porter`` stemming, ranked by BM25) and PostgreSQL's own (a
generated ``tsvector`` with the ``english`` configuration and a GIN index, ranked by ``ts_rank_cd``). Scores
are mapped into [0, 1) as ``x / (1 + x)`` of each ranker's raw score (BM25 negated), so that
``score_threshold`` means the same on both stores (the same ordering, not the same numbers).

With ``--embeddings`` (version 9): ``chunk_vectors`` keeps each chunk's vector, written with its chunks in the
transaction that ends the ingestion (or later, ``add_vectors``, for chunks stored before), and ``vector_search``
ranks the chunks by cosine distance to a query's vector, exactly (every candidate chunk compared; no
approximate index): sqlite-vec's ``vec_distance_cosine`` over float32 BLOBs on SQLite, pgvector's ``<=>`` over
the ``REAL[]`` column cast to ``vector`` on PostgreSQL.
Whether the database can is the store's ``vectors`` (``use_vectors``, at open).

Most SQL here is written once for both databases (``?`` placeholders, turned into ``$n`` for PostgreSQL by
``_Database``); only the chunk search differs. Owners as everywhere: every read a client reaches takes
``owner``.
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
import struct
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ._base import Store

__all__ = ["Chunk", "Hit", "VectorStoreFile", "VectorStoreRecord", "VectorStores", "vector_stores_of"]

Statement = tuple[str, Sequence[Any]]


@dataclass(frozen=True, slots=True)
class Many:
    """One statement run over many rows, in a ``_Database.transaction``."""

    sql: str
    rows: Sequence[Sequence[Any]]


STORE_COLUMNS = "id, owner, created_at, name, metadata, expires_after, expires_at, last_active_at"
FILE_COLUMNS = (
    "vector_store_id, file_id, owner, created_at, status, last_error, usage_bytes, chunking, attributes, batch_id"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class VectorStoreRecord:
    id: str
    owner: str
    created_at: int
    name: str
    metadata: dict[str, Any]
    expires_after: dict[str, Any] | None
    expires_at: int | None
    last_active_at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VectorStoreFile:
    vector_store_id: str
    file_id: str
    owner: str
    created_at: int
    status: str
    last_error: dict[str, Any] | None
    usage_bytes: int
    chunking: dict[str, Any]
    attributes: dict[str, Any] | None
    batch_id: str | None


@dataclass(frozen=True, slots=True)
class Chunk:
    position: int
    text: str


@dataclass(frozen=True, slots=True)
class Hit:
    vector_store_id: str
    file_id: str
    position: int
    text: str
    score: float


def _json(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def _loads(value: Any) -> Any:
    return None if value is None else orjson.loads(bytes(value))


def _store(row: Any) -> VectorStoreRecord:
    return VectorStoreRecord(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        name=row[3],
        metadata=_loads(row[4]) or {},
        expires_after=_loads(row[5]),
        expires_at=row[6],
        last_active_at=row[7],
    )


def _file(row: Any) -> VectorStoreFile:
    return VectorStoreFile(
        vector_store_id=row[0],
        file_id=row[1],
        owner=row[2],
        created_at=row[3],
        status=row[4],
        last_error=_loads(row[5]),
        usage_bytes=row[6],
        chunking=_loads(row[7]) or {},
        attributes=_loads(row[8]),
        batch_id=row[9],
    )


_PLACEHOLDER = re.compile(r"\?")
_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(query: str) -> list[str]:
    """The words of a search query (letters and digits), lower-cased, each once: what both full-text engines
    are asked for, OR-ed (a chunk matching any word is a candidate; the ranking weighs how many and how rare)."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:64]


class _Database:
    """``fetch`` and ``transaction`` over either store's connections, one SQL dialect (``?`` placeholders)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.postgres = store.kind != "sqlite"

    @staticmethod
    def _numbered(sql: str) -> str:
        counter = itertools.count(1)
        return _PLACEHOLDER.sub(lambda _: f"${next(counter)}", sql)

    def one_of(self, column: str, values: Sequence[str]) -> tuple[str, Any]:
        """``column`` is one of ``values``, as one parameter whatever their number (a placeholder each
        would meet the databases' parameter limits: a store of thousands of files)."""
        if self.postgres:
            return f"{column} = ANY(CAST(? AS TEXT[]))", list(values)
        return f"{column} IN (SELECT value FROM json_each(?))", orjson.dumps(list(values)).decode()

    async def fetch(self, sql: str, *params: Any, planned_each_time: bool = False) -> list[Any]:
        """The rows of ``sql``. ``planned_each_time``: PostgreSQL plans it for these parameters at every run
        (``plan_cache_mode``), never with the generic plan it otherwise settles on for a prepared statement
        after five runs, for a query whose best plan depends on them (``one_of`` a store's every file is
        estimated as a few rows by the generic plan, which then hashes every chunk's text: 7x slower)."""
        if self.postgres:
            if not planned_each_time:
                return list(await self.store._pool.fetch(self._numbered(sql), *params))
            async with self.store._pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                return list(await conn.fetch(self._numbered(sql), *params))
        return await self.store._read(lambda conn: conn.execute(sql, params).fetchall())

    async def transaction(self, statements: Sequence[Statement | Many]) -> list[int]:
        """Run ``statements`` in order in one transaction (a ``Many`` over each of its rows); returns each one's
        row count (0 for a ``Many``)."""
        if self.postgres:
            counts: list[int] = []
            async with self.store._pool.acquire() as conn, conn.transaction():
                for statement in statements:
                    if isinstance(statement, Many):
                        if statement.rows:
                            await conn.executemany(self._numbered(statement.sql), statement.rows)
                        counts.append(0)
                        continue
                    status = await conn.execute(self._numbered(statement[0]), *statement[1])
                    tail = status.split()[-1] if status else "0"
                    counts.append(int(tail) if tail.isdigit() else 0)
            return counts

        def run(conn: sqlite3.Connection) -> list[int]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                found: list[int] = []
                for statement in statements:
                    if isinstance(statement, Many):
                        if statement.rows:
                            conn.executemany(statement.sql, statement.rows)
                        found.append(0)
                    else:
                        found.append(conn.execute(statement[0], statement[1]).rowcount)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return found

        return await self.store._write_call(run)


class VectorStores:
    """The vector stores of one store; see the module docstring."""

    def __init__(self, store: Store) -> None:
        self.db = _Database(store)

    # ------------------------------------------------------------------ stores

    async def create(self, record: VectorStoreRecord) -> None:
        r = record
        await self.db.transaction(
            [
                (
                    f"INSERT INTO vector_stores ({STORE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        r.id,
                        r.owner,
                        r.created_at,
                        r.name,
                        _json(r.metadata),
                        _json(r.expires_after),
                        r.expires_at,
                        r.last_active_at,
                    ),
                )
            ]
        )

    async def get(self, store_id: str, owner: str) -> VectorStoreRecord | None:
        rows = await self.db.fetch(
            f"SELECT {STORE_COLUMNS} FROM vector_stores WHERE id = ? AND owner = ?", store_id, owner
        )
        return _store(rows[0]) if rows else None

    async def list(
        self, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[VectorStoreRecord], bool] | None:
        bound = -1 if order == "asc" else 1 << 62
        if after is not None:
            found = await self.db.fetch("SELECT seq FROM vector_stores WHERE id = ? AND owner = ?", after, owner)
            if not found:
                return None
            bound = found[0][0]
        compare, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
        rows = await self.db.fetch(
            f"SELECT {STORE_COLUMNS} FROM vector_stores WHERE owner = ? AND seq {compare} ? "
            f"ORDER BY seq {direction} LIMIT ?",
            owner,
            bound,
            limit + 1,
        )
        return [_store(r) for r in rows[:limit]], len(rows) > limit

    async def update(self, record: VectorStoreRecord) -> None:
        r = record
        await self.db.transaction(
            [
                (
                    "UPDATE vector_stores SET name = ?, metadata = ?, expires_after = ?, expires_at = ?, "
                    "last_active_at = ? WHERE id = ? AND owner = ?",
                    (
                        r.name,
                        _json(r.metadata),
                        _json(r.expires_after),
                        r.expires_at,
                        r.last_active_at,
                        r.id,
                        r.owner,
                    ),
                )
            ]
        )

    async def delete(self, store_id: str, owner: str) -> bool:
        counts = await self.db.transaction(
            [
                ("DELETE FROM vector_stores WHERE id = ? AND owner = ?", (store_id, owner)),
                (
                    "DELETE FROM vector_store_files WHERE vector_store_id = ? "
                    "AND NOT EXISTS (SELECT 1 FROM vector_stores WHERE id = ?)",
                    (store_id, store_id),
                ),
                (
                    "DELETE FROM vector_store_batches WHERE vector_store_id = ? "
                    "AND NOT EXISTS (SELECT 1 FROM vector_stores WHERE id = ?)",
                    (store_id, store_id),
                ),
                (
                    "DELETE FROM chunks WHERE vector_store_id = ? "
                    "AND NOT EXISTS (SELECT 1 FROM vector_stores WHERE id = ?)",
                    (store_id, store_id),
                ),
            ]
        )
        return counts[0] == 1

    async def counts(self, store_id: str) -> tuple[dict[str, int], int]:
        """``file_counts`` by status and the store's ``usage_bytes``."""
        rows = await self.db.fetch(
            "SELECT status, count(*), coalesce(sum(usage_bytes), 0) FROM vector_store_files "
            "WHERE vector_store_id = ? GROUP BY status",
            store_id,
        )
        return {row[0]: int(row[1]) for row in rows}, sum(int(row[2]) for row in rows)

    # ------------------------------------------------------------------ files

    async def attach(self, record: VectorStoreFile, process_id: str) -> None:
        """Attach a file (again: its chunks dropped, its ingestion started over), ingested by ``process_id``."""
        r = record
        await self.db.transaction(
            [
                ("DELETE FROM chunks WHERE vector_store_id = ? AND file_id = ?", (r.vector_store_id, r.file_id)),
                (
                    "DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?",
                    (r.vector_store_id, r.file_id),
                ),
                (
                    f"INSERT INTO vector_store_files ({FILE_COLUMNS}, process_id) VALUES ({','.join('?' * 11)})",
                    (
                        r.vector_store_id,
                        r.file_id,
                        r.owner,
                        r.created_at,
                        r.status,
                        _json(r.last_error),
                        r.usage_bytes,
                        _json(r.chunking),
                        _json(r.attributes),
                        r.batch_id,
                        process_id,
                    ),
                ),
            ]
        )

    async def get_file(self, store_id: str, file_id: str, owner: str) -> VectorStoreFile | None:
        rows = await self.db.fetch(
            f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND owner = ?",
            store_id,
            file_id,
            owner,
        )
        return _file(rows[0]) if rows else None

    async def list_files(
        self,
        store_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
        status: str | None = None,
        batch_id: str | None = None,
    ) -> tuple[list[VectorStoreFile], bool] | None:
        bound = -1 if order == "asc" else 1 << 62
        if after is not None:
            found = await self.db.fetch(
                "SELECT seq FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?", store_id, after
            )
            if not found:
                return None
            bound = found[0][0]
        compare, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
        where = f"vector_store_id = ? AND seq {compare} ?"
        params: list[Any] = [store_id, bound]
        if status is not None:
            where += " AND status = ?"
            params.append(status)
        if batch_id is not None:
            where += " AND batch_id = ?"
            params.append(batch_id)
        rows = await self.db.fetch(
            f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE {where} ORDER BY seq {direction} LIMIT ?",
            *params,
            limit + 1,
        )
        return [_file(r) for r in rows[:limit]], len(rows) > limit

    async def set_attributes(self, store_id: str, file_id: str, attributes: dict[str, Any] | None) -> None:
        await self.db.transaction(
            [
                (
                    "UPDATE vector_store_files SET attributes = ? WHERE vector_store_id = ? AND file_id = ?",
                    (_json(attributes), store_id, file_id),
                )
            ]
        )

    async def detach(self, store_id: str, file_id: str) -> bool:
        counts = await self.db.transaction(
            [
                (
                    "DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?",
                    (store_id, file_id),
                ),
                ("DELETE FROM chunks WHERE vector_store_id = ? AND file_id = ?", (store_id, file_id)),
            ]
        )
        return counts[0] == 1

    async def forget_file(self, file_id: str, owner: str) -> None:
        """A deleted file leaves every vector store of its owner, with its chunks."""
        await self.db.transaction(
            [
                ("DELETE FROM vector_store_files WHERE file_id = ? AND owner = ?", (file_id, owner)),
                (
                    "DELETE FROM chunks WHERE file_id = ? AND vector_store_id IN "
                    "(SELECT id FROM vector_stores WHERE owner = ?)",
                    (file_id, owner),
                ),
            ]
        )

    async def finish_file(
        self,
        store_id: str,
        file_id: str,
        process_id: str,
        *,
        chunks: Sequence[Chunk],
        usage_bytes: int,
        last_error: dict[str, Any] | None,
        vectors: Sequence[Sequence[float]] = (),
        model: str = "",
    ) -> bool:
        """End an ingestion held by ``process_id``: its chunks (and their ``vectors``, one per chunk, from
        ``model``, when given) and ``completed``, or ``failed`` with ``last_error``. False (nothing written)
        when the file was detached, re-attached or taken over since."""
        held = (
            "EXISTS (SELECT 1 FROM vector_store_files WHERE vector_store_id = CAST(? AS TEXT) "
            "AND file_id = CAST(? AS TEXT) AND process_id = CAST(? AS TEXT) AND status = 'in_progress')"
        )
        rows = [(store_id, file_id, c.position, c.text, store_id, file_id, process_id) for c in chunks]
        counts = await self.db.transaction(
            [
                ("DELETE FROM chunks WHERE vector_store_id = ? AND file_id = ?", (store_id, file_id)),
                # The chunks go in only while the row is still this ingestion's, in the transaction that ends it.
                Many(
                    "INSERT INTO chunks (vector_store_id, file_id, position, text) SELECT CAST(? AS TEXT), "
                    f"CAST(? AS TEXT), CAST(? AS INTEGER), CAST(? AS TEXT) WHERE {held}",
                    rows if last_error is None else [],
                ),
                # Each vector beside the chunk just inserted (none when the chunks were not, above).
                Many(self._vector_insert(), self._vector_rows(store_id, file_id, chunks, vectors, model))
                if vectors and last_error is None
                else Many("", []),
                (
                    "UPDATE vector_store_files SET status = ?, last_error = ?, usage_bytes = ?, process_id = NULL "
                    "WHERE vector_store_id = ? AND file_id = ? AND process_id = ? AND status = 'in_progress'",
                    (
                        "failed" if last_error is not None else "completed",
                        _json(last_error),
                        usage_bytes if last_error is None else 0,
                        store_id,
                        file_id,
                        process_id,
                    ),
                ),
            ]
        )
        return counts[3] == 1

    def _vector_insert(self) -> str:
        data = "CAST(? AS REAL[])" if self.db.postgres else "CAST(? AS BLOB)"
        return (
            f"INSERT INTO chunk_vectors (chunk_id, model, dims, data) SELECT id, CAST(? AS TEXT), "
            f"CAST(? AS INTEGER), {data} FROM chunks WHERE vector_store_id = ? AND file_id = ? AND position = ?"
        )

    def _vector_rows(
        self,
        store_id: str,
        file_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        model: str,
    ) -> list[tuple[Any, ...]]:
        assert len(vectors) == len(chunks), "one vector per chunk"
        return [
            (model, len(v), self._vector_value(v), store_id, file_id, c.position)
            for c, v in zip(chunks, vectors, strict=True)
        ]

    def _vector_value(self, vector: Sequence[float]) -> Any:
        """A vector as the database takes it: a list for ``REAL[]``, float32 little-endian for sqlite-vec."""
        if self.db.postgres:
            return list(vector)
        if isinstance(vector, array) and vector.typecode == "f" and sys.byteorder == "little":
            return vector.tobytes()
        return struct.pack(f"<{len(vector)}f", *vector)

    async def stale_ingestions(self, max_age: float) -> list[tuple[VectorStoreFile, str | None]]:
        """In-progress files whose process is gone (no row, or no heartbeat for ``max_age`` seconds), each with
        the process that held it."""
        rows = await self.db.fetch(
            f"SELECT {FILE_COLUMNS}, process_id FROM vector_store_files f "
            "LEFT JOIN processes p ON p.id = f.process_id "
            "WHERE f.status = 'in_progress' AND (p.id IS NULL OR p.heartbeat_at < ?)",
            time.time() - max_age,
        )
        return [(_file(r), r[10]) for r in rows]

    async def touch(self, store_ids: Sequence[str], now: int) -> None:
        """``last_active_at`` (and the expiry anchored on it) moved to ``now``: the stores were searched."""
        marks = ",".join("?" * len(store_ids))
        await self.db.transaction(
            [
                (
                    f"UPDATE vector_stores SET last_active_at = ? WHERE id IN ({marks})",
                    (now, *store_ids),
                )
            ]
        )

    async def take_over(self, store_id: str, file_id: str, old: str | None, new: str) -> bool:
        """Move an in-progress ingestion from the gone process ``old`` to ``new``; False if another did first."""
        if old is None:
            sql = (
                "UPDATE vector_store_files SET process_id = ? WHERE vector_store_id = ? AND file_id = ? "
                "AND process_id IS NULL AND status = 'in_progress'"
            )
            params: tuple[Any, ...] = (new, store_id, file_id)
        else:
            sql = (
                "UPDATE vector_store_files SET process_id = ? WHERE vector_store_id = ? AND file_id = ? "
                "AND process_id = ? AND status = 'in_progress'"
            )
            params = (new, store_id, file_id, old)
        return (await self.db.transaction([(sql, params)]))[0] == 1

    async def purge(self, before: float | None) -> int:
        """Delete what belongs to no file or store any more: the rows and chunks of files that are gone
        (expired, purged) and, with ``before`` (``--retention``), the stores not active since; returns how many
        stores went."""
        statements: list[Statement | Many] = []
        if before is not None:
            statements.append(("DELETE FROM vector_stores WHERE last_active_at < ?", (int(before),)))
        gone_store = "vector_store_id NOT IN (SELECT id FROM vector_stores)"
        gone_file = "file_id NOT IN (SELECT id FROM files)"
        statements += [
            (f"DELETE FROM vector_store_files WHERE {gone_store} OR {gone_file}", ()),
            (f"DELETE FROM vector_store_batches WHERE {gone_store}", ()),
            (f"DELETE FROM chunks WHERE {gone_store} OR {gone_file}", ()),
        ]
        counts = await self.db.transaction(statements)
        return counts[0] if before is not None else 0

    # ------------------------------------------------------------------ batches

    async def create_batch(self, batch_id: str, store_id: str, owner: str, created_at: int) -> None:
        await self.db.transaction(
            [
                (
                    "INSERT INTO vector_store_batches (id, vector_store_id, owner, created_at) VALUES (?, ?, ?, ?)",
                    (batch_id, store_id, owner, created_at),
                )
            ]
        )

    async def get_batch(self, batch_id: str, store_id: str, owner: str) -> int | None:
        """The batch's ``created_at``, or None."""
        rows = await self.db.fetch(
            "SELECT created_at FROM vector_store_batches WHERE id = ? AND vector_store_id = ? AND owner = ?",
            batch_id,
            store_id,
            owner,
        )
        return rows[0][0] if rows else None

    async def batch_counts(self, batch_id: str) -> dict[str, int]:
        rows = await self.db.fetch(
            "SELECT status, count(*) FROM vector_store_files WHERE batch_id = ? GROUP BY status", batch_id
        )
        return {row[0]: int(row[1]) for row in rows}

    async def cancel_batch(self, batch_id: str) -> None:
        await self.db.transaction(
            [
                (
                    "UPDATE vector_store_files SET status = 'cancelled', process_id = NULL "
                    "WHERE batch_id = ? AND status = 'in_progress'",
                    (batch_id,),
                )
            ]
        )

    # ------------------------------------------------------------------ search

    async def completed_files(self, store_ids: Sequence[str]) -> list[tuple[str, str, dict[str, Any] | None]]:
        """``(vector_store_id, file_id, attributes)`` of every completed file of the stores (for filters)."""
        marks = ",".join("?" * len(store_ids))
        rows = await self.db.fetch(
            "SELECT vector_store_id, file_id, attributes FROM vector_store_files "
            f"WHERE status = 'completed' AND vector_store_id IN ({marks})",
            *store_ids,
        )
        return [(r[0], r[1], _loads(r[2])) for r in rows]

    def _within(self, pairs: Sequence[tuple[str, str]], table: str = "") -> tuple[str, list[Any]]:
        """SQL holding a chunk (of ``table``, a prefix such as ``c.``) to the pairs' stores and files, and its
        parameters; the exact pairs are kept by the caller (a store and a file of different pairs match too)."""
        in_stores, stores = self.db.one_of(f"{table}vector_store_id", sorted({s for s, _ in pairs}))
        in_files, files = self.db.one_of(f"{table}file_id", sorted({f for _, f in pairs}))
        return f"{in_stores} AND {in_files}", [stores, files]

    async def search(self, pairs: Sequence[tuple[str, str]], terms: Sequence[str], limit: int) -> list[Hit]:
        """The best ``limit`` chunks of the ``(vector_store_id, file_id)`` pairs for any of ``terms``."""
        if not pairs or not terms:
            return []
        if self.db.postgres:
            within, scope = self._within(pairs)
            # Each word a prefix-free lexeme of the english configuration; quoted so that no word is an operator.
            tsquery = " | ".join("'" + t.replace("'", "") + "'" for t in terms)
            sql = (
                "SELECT vector_store_id, file_id, position, text, ts_rank_cd(tsv, q, 32) AS score "
                "FROM chunks, to_tsquery('english', ?) q "
                f"WHERE tsv @@ q AND {within} "
                "ORDER BY score DESC, vector_store_id, file_id, position LIMIT ?"
            )
            rows = await self.db.fetch(sql, tsquery, *scope, limit * 4)
            hits = [Hit(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]
        else:
            within, scope = self._within(pairs, "c.")
            match = " OR ".join('"' + t.replace('"', "") + '"' for t in terms)
            sql = (
                "SELECT c.vector_store_id, c.file_id, c.position, c.text, bm25(chunks_fts) AS rank "
                "FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
                f"WHERE chunks_fts MATCH ? AND {within} "
                "ORDER BY rank, c.vector_store_id, c.file_id, c.position LIMIT ?"
            )
            rows = await self.db.fetch(sql, match, *scope, limit * 4)
            hits = [Hit(r[0], r[1], r[2], r[3], -float(r[4]) / (1 - float(r[4]))) for r in rows]
        wanted = set(pairs)
        return [h for h in hits if (h.vector_store_id, h.file_id) in wanted][:limit]

    @property
    def vectors(self) -> str | None:
        """What ranks by vectors in this database ("sqlite-vec v0.1.9", "pgvector 0.8.0"), or None."""
        return getattr(self.db.store, "vectors", None)

    async def vector_search(
        self, pairs: Sequence[tuple[str, str]], vector: Sequence[float], model: str, limit: int
    ) -> list[Hit]:
        """The ``limit`` chunks of the pairs whose vectors (of ``model``, of ``vector``'s dimension) are nearest
        to ``vector`` by cosine distance, nearest first; ``score`` is the cosine similarity.

        A vector of zeros has no direction, so no distance (sqlite-vec answers NULL, pgvector NaN, each sorted
        after every distance): such a query is near nothing, and such a chunk is near no query (found by its
        words only)."""
        if not pairs or not any(vector) or self.vectors is None:
            return []
        within, scope = self._within(pairs, "c.")
        if self.db.postgres:
            schema = '"' + str(getattr(self.db.store, "vector_schema", "public")).replace('"', '""') + '"'
            distance = (
                f"CAST(v.data AS {schema}.vector) OPERATOR({schema}.<=>) CAST(CAST(? AS REAL[]) AS {schema}.vector)"
            )
            nearest = "d"  # NaN sorts after every number
        else:
            distance = "vec_distance_cosine(v.data, ?)"
            nearest = "d IS NULL, d"  # NULL would sort first
        sql = (
            f"SELECT c.vector_store_id, c.file_id, c.position, c.text, {distance} AS d "
            "FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
            f"WHERE v.model = ? AND v.dims = ? AND {within} "
            f"ORDER BY {nearest}, c.vector_store_id, c.file_id, c.position LIMIT ?"
        )
        value = self._vector_value(vector)
        rows = await self.db.fetch(sql, value, model, len(vector), *scope, limit * 4, planned_each_time=True)
        wanted = set(pairs)
        hits = [Hit(r[0], r[1], r[2], r[3], 1.0 - r[4]) for r in rows if r[4] is not None and not math.isnan(r[4])]
        return [h for h in hits if (h.vector_store_id, h.file_id) in wanted][:limit]

    async def chunks_without_vectors(self, limit: int) -> list[tuple[int, str]]:
        """``(chunk id, text)`` of up to ``limit`` chunks of completed files that have no vector (stored before
        ``--embeddings``), oldest first."""
        rows = await self.db.fetch(
            "SELECT c.id, c.text FROM chunks c JOIN vector_store_files f ON f.vector_store_id = c.vector_store_id "
            "AND f.file_id = c.file_id WHERE f.status = 'completed' "
            "AND NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id) ORDER BY c.id LIMIT ?",
            limit,
        )
        return [(int(r[0]), r[1]) for r in rows]

    async def add_vectors(self, vectors: Sequence[tuple[int, Sequence[float]]], model: str) -> None:
        """Store ``(chunk id, vector)`` pairs of ``model``: for chunks that still exist and have none yet (another
        process may have filled them meanwhile)."""
        data = "CAST(? AS REAL[])" if self.db.postgres else "CAST(? AS BLOB)"
        sql = (
            f"INSERT INTO chunk_vectors (chunk_id, model, dims, data) SELECT id, CAST(? AS TEXT), CAST(? AS INTEGER), "
            f"{data} FROM chunks WHERE id = ? ON CONFLICT (chunk_id) DO NOTHING"
        )
        rows = [(model, len(v), self._vector_value(v), chunk_id) for chunk_id, v in vectors]
        await self.db.transaction([Many(sql, rows)])

    async def vector_counts(self, store_id: str) -> dict[int, int]:
        """How many chunks of the store have a vector, by dimension."""
        rows = await self.db.fetch(
            "SELECT v.dims, count(*) FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
            "WHERE c.vector_store_id = ? GROUP BY v.dims",
            store_id,
        )
        return {int(r[0]): int(r[1]) for r in rows}


def vector_stores_of(store: Store) -> VectorStores:
    """The vector stores of an opened ``store`` (one per store, made on first use)."""
    existing: VectorStores | None = getattr(store, "_vector_stores", None)
    if existing is None:
        existing = VectorStores(store)
        store._vector_stores = existing  # type: ignore[attr-defined]
    return existing
