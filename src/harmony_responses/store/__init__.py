"""store — where stored responses, their event logs, items and conversations live.

One interface (``Store``, in ``_base``) with two implementations: SQLite (``_sqlite``, the default: a file
in the data directory) and PostgreSQL (``_postgres``, for several server processes sharing one
database). ``_files`` keeps uploaded files (the Files API) in either, and
``_vector_stores`` the vector stores file_search searches. ``_migrations`` holds the versioned
schemas, applied at start; ``_writer`` batches the writes of all running streams into one transaction per
round.

``open_store(spec, data_dir)`` turns the ``--store`` option into a store:

- ``sqlite`` (default): ``DATA_DIR/responses.sqlite3``;
- ``sqlite:PATH``: that SQLite file;
- ``postgresql://…`` or ``postgres://…``: that PostgreSQL database.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._base import (
    ACTIVE_STATUSES,
    ActiveResponse,
    AppendEvents,
    AppendItems,
    ConversationRecord,
    CreateConversation,
    InsertResponse,
    ItemKind,
    Op,
    Page,
    ProcessInfo,
    PutTrace,
    Store,
    StoredResponse,
    StoreError,
    StoreUnavailable,
    UpdateResponse,
)
from ._files import PART_BYTES as FILE_PART_BYTES
from ._files import FileRecord, FileStore, files_of
from ._postgres import PostgresStore
from ._sqlite import DB_FILE, SQLiteStore, set_wal
from ._vector_stores import Chunk, Hit, VectorStoreFile, VectorStoreRecord, VectorStores, query_terms, vector_stores_of
from ._writer import Writer

__all__ = [
    "ACTIVE_STATUSES",
    "FILE_PART_BYTES",
    "ActiveResponse",
    "AppendEvents",
    "AppendItems",
    "Chunk",
    "ConversationRecord",
    "CreateConversation",
    "FileRecord",
    "FileStore",
    "Hit",
    "InsertResponse",
    "ItemKind",
    "Op",
    "Page",
    "PostgresStore",
    "ProcessInfo",
    "PutTrace",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredResponse",
    "UpdateResponse",
    "VectorStoreFile",
    "VectorStoreRecord",
    "VectorStores",
    "Writer",
    "default_data_dir",
    "describe_store",
    "files_of",
    "parse_retention",
    "query_terms",
    "set_wal",
    "store_from_spec",
    "vector_stores_of",
]

DATA_DIR_ENV = "HARMONY_RESPONSES_DATA_DIR"


def default_data_dir() -> Path:
    """``$HARMONY_RESPONSES_DATA_DIR``, else ``$XDG_DATA_HOME/harmony-responses``, else
    ``~/.local/share/harmony-responses``."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "harmony-responses"


def store_from_spec(spec: str, data_dir: str | os.PathLike[str] | None = None) -> Store:
    """The (not yet opened) store that ``spec`` names.

    Raises:
        StoreError: the spec names no store.
    """
    spec = spec.strip()
    if spec.startswith(("postgresql://", "postgres://")):
        return PostgresStore(spec)
    kind, colon, path = spec.partition(":")
    if kind == "sqlite":
        if colon and path:
            return SQLiteStore(Path(path).expanduser())
        directory = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
        return SQLiteStore(directory / DB_FILE)
    raise StoreError(
        f"unknown store {spec!r}: use 'sqlite' (a file in the data directory, the default), 'sqlite:PATH', "
        "or a 'postgresql://user:password@host:port/database' URL"
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_retention(text: str) -> float | None:
    """``--retention``: ``forever`` (None), or a number followed by s, m, h, d or w (``7d``), in seconds.

    Raises:
        ValueError: anything else (argparse shows it as the option's error).
    """
    value = text.strip().lower()
    if value in ("forever", "none", "0", ""):
        return None
    number, unit = value[:-1], value[-1]
    if unit not in _UNITS:
        number, unit = value, "s"
    try:
        amount = float(number)
    except ValueError:
        raise ValueError(f"expected an age such as 30m, 12h, 7d or 2w, or 'forever'; got {text!r}") from None
    if amount <= 0:
        raise ValueError(f"the retention must be positive, got {text!r}")
    return amount * _UNITS[unit]


def describe_store(spec: str, data_dir: str | os.PathLike[str] | None, retention: float | None) -> str:
    """One line for the banner: which store, where, and how long data is kept."""
    try:
        where = store_from_spec(spec, data_dir).describe()
    except StoreError as exc:
        return str(exc)
    if retention is None:
        return f"{where} (kept until deleted)"
    for unit in ("d", "h", "m"):
        if retention % _UNITS[unit] == 0:
            return f"{where} (retention {int(retention // _UNITS[unit])}{unit})"
    return f"{where} (retention {retention:g}s)"
