"""Uploaded files (the Files API, ``http/files.py``): their rows and their bytes, in either store.

A file is a row of ``files`` (who owns it, its name, purpose, size, content type, expiry and status) and its
bytes in ``file_parts``, in parts of at most ``PART_BYTES`` each. An upload makes its row first (status
``uploading``, invisible to every read), writes its parts as they arrive and then completes the row
(``uploaded``): an upload never sits whole in memory, and a file is visible only once all of its bytes are
stored. An upload that fails (too large, cut off, refused) is discarded; one a killed process left
``uploading`` is deleted by a later ``sweep`` (any process's: the row's ``created_at`` says how old it is).

Owners as for responses: every read takes ``owner`` and answers as if another owner's file did not exist. An
expired file (``expires_at`` passed) answers as a missing one and is deleted by ``sweep``.

``files_of(store)`` gives the ``FileStore`` of an opened store, which shares the store's connections (SQLite's
writer thread and readers, PostgreSQL's pool).
"""

from __future__ import annotations

import abc
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from ._base import Store

__all__ = ["PART_BYTES", "FileRecord", "FileStore", "files_of"]

PART_BYTES = 1 << 20
SWEEP_EVERY = 60.0
STALE_UPLOAD = 86400

COLUMNS = "id, owner, created_at, bytes, filename, purpose, content_type, expires_at"


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRecord:
    id: str
    owner: str
    created_at: int
    bytes: int
    filename: str
    purpose: str
    content_type: str | None
    expires_at: int | None


def _record(row: Any) -> FileRecord:
    return FileRecord(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        bytes=row[3],
        filename=row[4],
        purpose=row[5],
        content_type=row[6],
        expires_at=row[7],
    )


def _visible(now: int) -> str:
    return f"status = 'uploaded' AND (expires_at IS NULL OR expires_at > {int(now)})"


class FileStore(abc.ABC):
    """The files of one store; see the module docstring."""

    @abc.abstractmethod
    async def begin(self, file_id: str, owner: str, created_at: int) -> None:
        """The row of an upload starting (``uploading``: not visible yet)."""

    @abc.abstractmethod
    async def put_part(self, file_id: str, part: int, data: bytes) -> None:
        """Store part ``part`` (from 0) of an upload in progress."""

    @abc.abstractmethod
    async def finish(self, record: FileRecord) -> None:
        """Complete the row once all of the file's parts are stored: from now on it is visible."""

    @abc.abstractmethod
    async def discard(self, file_id: str) -> None:
        """Drop an upload that did not complete, with its parts."""

    @abc.abstractmethod
    async def get(self, file_id: str, owner: str) -> FileRecord | None: ...

    @abc.abstractmethod
    async def list(
        self, owner: str, *, purpose: str | None, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[FileRecord], bool] | None:
        """A page of the owner's files in upload order and whether more follow; None when ``after`` names none."""

    @abc.abstractmethod
    async def delete(self, file_id: str, owner: str) -> bool:
        """Delete the file and its bytes; False if the owner has no such file."""

    @abc.abstractmethod
    async def read_part(self, file_id: str, part: int) -> bytes | None:
        """Part ``part`` of a stored file's bytes; None past its last."""

    @abc.abstractmethod
    async def sweep(self, *, stale_before: int) -> int:
        """Delete expired files, and uploads begun before ``stale_before`` (Unix seconds) that never completed;
        returns how many rows went."""

    @abc.abstractmethod
    async def purge(self, before: float) -> int:
        """``--retention``: delete the files uploaded before ``before`` (Unix seconds); returns how many."""

    _swept_at: float | None = None

    async def tidy(self) -> None:
        """``sweep`` at most once a minute per process (uploads and listings call it): stale uploads are a
        day old, so that a slow upload in progress in any process sharing the store is never swept."""
        now = time.monotonic()
        if self._swept_at is None or now - self._swept_at > SWEEP_EVERY:
            self._swept_at = now
            await self.sweep(stale_before=int(time.time()) - STALE_UPLOAD)

    async def content(self, record: FileRecord) -> AsyncIterator[bytes]:
        """The file's bytes, a part at a time."""
        part = 0
        while (data := await self.read_part(record.id, part)) is not None:
            yield data
            part += 1


class SQLiteFiles(FileStore):
    """Files in the SQLite store: its writer thread for writes, its readers for reads."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def _write(self, statements: list[tuple[str, tuple[Any, ...]]]) -> int:
        return int(await self._store._write_call(lambda conn: self._store._transaction(conn, statements)))

    async def begin(self, file_id: str, owner: str, created_at: int) -> None:
        sql = f"INSERT INTO files ({COLUMNS}, status) VALUES (?, ?, ?, 0, '', '', NULL, NULL, 'uploading')"
        await self._write([(sql, (file_id, owner, created_at))])

    async def put_part(self, file_id: str, part: int, data: bytes) -> None:
        await self._write(
            [("INSERT OR REPLACE INTO file_parts (file_id, part, data) VALUES (?, ?, ?)", (file_id, part, data))]
        )

    async def finish(self, record: FileRecord) -> None:
        r = record
        sql = (
            "UPDATE files SET bytes = ?, filename = ?, purpose = ?, content_type = ?, expires_at = ?, "
            "status = 'uploaded' WHERE id = ?"
        )
        await self._write([(sql, (r.bytes, r.filename, r.purpose, r.content_type, r.expires_at, r.id))])

    async def discard(self, file_id: str) -> None:
        await self._write(
            [
                ("DELETE FROM files WHERE id = ? AND status = 'uploading'", (file_id,)),
                (
                    "DELETE FROM file_parts WHERE file_id = ? AND NOT EXISTS (SELECT 1 FROM files WHERE id = ?)",
                    (file_id, file_id),
                ),
            ]
        )

    async def get(self, file_id: str, owner: str) -> FileRecord | None:
        sql = f"SELECT {COLUMNS} FROM files WHERE id = ? AND owner = ? AND {_visible(int(time.time()))}"
        row = await self._store._read(lambda conn: conn.execute(sql, (file_id, owner)).fetchone())
        return None if row is None else _record(row)

    async def list(
        self, owner: str, *, purpose: str | None, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[FileRecord], bool] | None:
        now = int(time.time())

        def query(conn: sqlite3.Connection) -> tuple[list[FileRecord], bool] | None:
            if after is None:
                bound = -1 if order == "asc" else 1 << 62
            else:
                row = conn.execute("SELECT seq FROM files WHERE id = ? AND owner = ?", (after, owner)).fetchone()
                if row is None:
                    return None
                bound = row[0]
            compare, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
            where = f"owner = ? AND seq {compare} ? AND {_visible(now)}"
            params: list[Any] = [owner, bound]
            if purpose is not None:
                where += " AND purpose = ?"
                params.append(purpose)
            sql = f"SELECT {COLUMNS} FROM files WHERE {where} ORDER BY seq {direction} LIMIT ?"
            rows = conn.execute(sql, (*params, limit + 1)).fetchall()
            return [_record(r) for r in rows[:limit]], len(rows) > limit

        return await self._store._read(query)

    async def delete(self, file_id: str, owner: str) -> bool:
        visible = _visible(int(time.time()))
        statements = [
            (f"DELETE FROM files WHERE id = ? AND owner = ? AND {visible}", (file_id, owner)),
            (
                "DELETE FROM file_parts WHERE file_id = ? AND NOT EXISTS (SELECT 1 FROM files WHERE id = ?)",
                (file_id, file_id),
            ),
        ]
        return await self._write(statements) == 1

    async def read_part(self, file_id: str, part: int) -> bytes | None:
        sql = "SELECT data FROM file_parts WHERE file_id = ? AND part = ?"
        row = await self._store._read(lambda conn: conn.execute(sql, (file_id, part)).fetchone())
        return None if row is None else bytes(row[0])

    async def sweep(self, *, stale_before: int) -> int:
        now = int(time.time())
        gone = (
            "SELECT id FROM files WHERE (status = 'uploading' AND created_at < ?) "
            "OR (expires_at IS NOT NULL AND expires_at <= ?)"
        )
        return await self._write(
            [
                (f"DELETE FROM files WHERE id IN ({gone})", (stale_before, now)),
                ("DELETE FROM file_parts WHERE file_id NOT IN (SELECT id FROM files)", ()),
            ]
        )

    async def purge(self, before: float) -> int:
        return await self._write(
            [
                ("DELETE FROM files WHERE created_at < ?", (int(before),)),
                ("DELETE FROM file_parts WHERE file_id NOT IN (SELECT id FROM files)", ()),
            ]
        )


class PostgresFiles(FileStore):
    """Files in the PostgreSQL store, through its pool."""

    def __init__(self, store: Any) -> None:
        self._store = store

    @property
    def _pool(self) -> Any:
        return self._store._pool

    async def begin(self, file_id: str, owner: str, created_at: int) -> None:
        await self._pool.execute(
            f"INSERT INTO files ({COLUMNS}, status) VALUES ($1, $2, $3, 0, '', '', NULL, NULL, 'uploading')",
            file_id,
            owner,
            created_at,
        )

    async def put_part(self, file_id: str, part: int, data: bytes) -> None:
        await self._pool.execute(
            "INSERT INTO file_parts (file_id, part, data) VALUES ($1, $2, $3) "
            "ON CONFLICT (file_id, part) DO UPDATE SET data = EXCLUDED.data",
            file_id,
            part,
            data,
        )

    async def finish(self, record: FileRecord) -> None:
        r = record
        await self._pool.execute(
            "UPDATE files SET bytes = $1, filename = $2, purpose = $3, content_type = $4, expires_at = $5, "
            "status = 'uploaded' WHERE id = $6",
            r.bytes,
            r.filename,
            r.purpose,
            r.content_type,
            r.expires_at,
            r.id,
        )

    async def discard(self, file_id: str) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM files WHERE id = $1 AND status = 'uploading'", file_id)
            await conn.execute(
                "DELETE FROM file_parts WHERE file_id = $1 AND NOT EXISTS (SELECT 1 FROM files WHERE id = $1)",
                file_id,
            )

    async def get(self, file_id: str, owner: str) -> FileRecord | None:
        row = await self._pool.fetchrow(
            f"SELECT {COLUMNS} FROM files WHERE id = $1 AND owner = $2 AND {_visible(int(time.time()))}",
            file_id,
            owner,
        )
        return None if row is None else _record(row)

    async def list(
        self, owner: str, *, purpose: str | None, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[FileRecord], bool] | None:
        if after is None:
            bound = -1 if order == "asc" else 1 << 62
        else:
            found = await self._pool.fetchval("SELECT seq FROM files WHERE id = $1 AND owner = $2", after, owner)
            if found is None:
                return None
            bound = found
        compare, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
        where = f"owner = $1 AND seq {compare} $2 AND {_visible(int(time.time()))}"
        params: list[Any] = [owner, bound, limit + 1]
        if purpose is not None:
            where += " AND purpose = $4"
            params.append(purpose)
        rows = await self._pool.fetch(
            f"SELECT {COLUMNS} FROM files WHERE {where} ORDER BY seq {direction} LIMIT $3", *params
        )
        return [_record(r) for r in rows[:limit]], len(rows) > limit

    async def delete(self, file_id: str, owner: str) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                f"DELETE FROM files WHERE id = $1 AND owner = $2 AND {_visible(int(time.time()))}", file_id, owner
            )
            if status != "DELETE 1":
                return False
            await conn.execute("DELETE FROM file_parts WHERE file_id = $1", file_id)
        return True

    async def read_part(self, file_id: str, part: int) -> bytes | None:
        data = await self._pool.fetchval("SELECT data FROM file_parts WHERE file_id = $1 AND part = $2", file_id, part)
        return None if data is None else bytes(data)

    async def sweep(self, *, stale_before: int) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                "DELETE FROM files WHERE (status = 'uploading' AND created_at < $1) "
                "OR (expires_at IS NOT NULL AND expires_at <= $2)",
                stale_before,
                int(time.time()),
            )
            await conn.execute("DELETE FROM file_parts WHERE file_id NOT IN (SELECT id FROM files)")
        return int(status.split()[-1])

    async def purge(self, before: float) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute("DELETE FROM files WHERE created_at < $1", int(before))
            await conn.execute("DELETE FROM file_parts WHERE file_id NOT IN (SELECT id FROM files)")
        return int(status.split()[-1])


def files_of(store: Store) -> FileStore:
    """The files of an opened ``store`` (one ``FileStore`` per store, made on first use)."""
    existing: FileStore | None = getattr(store, "_files", None)
    if existing is None:
        existing = SQLiteFiles(store) if store.kind == "sqlite" else PostgresFiles(store)
        store._files = existing  # type: ignore[attr-defined]
    return existing
