"""Versioned schema migrations, one list per database, applied in order at start.

Each migration is ``(version, statements)``; ``schema_migrations`` records which versions a database has.
A database whose highest version is above ``LATEST`` was migrated by newer code: the store refuses to
open it rather than guess (``StoreError``). Never edit a released migration; append a new one.

The two schemas are the same tables (``_base.py`` says what each keeps); the differences are types
(``BLOB``/``BYTEA`` for JSON kept byte-exact, ``REAL``/``DOUBLE PRECISION`` for timestamps) and SQLite's
``WITHOUT ROWID``, which clusters the event log and item lists by their primary key.

An event log is kept in chunks: one row holds the events ``seq..last_seq`` that one write round committed
for a response, newline-separated (compact JSON never contains a raw newline). Under load a round holds
dozens of events per stream, so the database stores one row where it would store dozens; the cost of
storing is then per round, not per token.
"""

from __future__ import annotations

__all__ = ["LATEST", "POSTGRES", "SQLITE"]

Migration = tuple[int, tuple[str, ...]]

SQLITE: tuple[Migration, ...] = (
    (
        1,
        (
            """CREATE TABLE processes (
                id TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                started_at REAL NOT NULL,
                heartbeat_at REAL NOT NULL
            )""",
            """CREATE TABLE responses (
                id TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                updated_at REAL NOT NULL,
                status TEXT NOT NULL,
                background INTEGER NOT NULL,
                previous_response_id TEXT,
                conversation_id TEXT,
                process_id TEXT,
                cancel_requested INTEGER NOT NULL DEFAULT 0,
                response BLOB NOT NULL
            )""",
            "CREATE INDEX responses_active ON responses (status) WHERE status IN ('queued', 'in_progress')",
            "CREATE INDEX responses_created ON responses (created_at)",
            """CREATE TABLE events (
                response_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                last_seq INTEGER NOT NULL,
                data BLOB NOT NULL,
                PRIMARY KEY (response_id, seq)
            ) WITHOUT ROWID""",
            """CREATE TABLE items (
                parent TEXT NOT NULL,
                kind TEXT NOT NULL,
                position INTEGER NOT NULL,
                id TEXT NOT NULL,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                data BLOB NOT NULL,
                PRIMARY KEY (parent, kind, position)
            ) WITHOUT ROWID""",
            "CREATE INDEX items_id ON items (id)",
            """CREATE TABLE conversations (
                id TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                updated_at REAL NOT NULL,
                metadata BLOB NOT NULL,
                next_position INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX conversations_updated ON conversations (updated_at)",
        ),
    ),
    # PostgreSQL's version 2 changes how it compresses; SQLite has nothing to change (versions stay equal).
    (2, ()),
    (
        3,
        (
            # The order items were stored in (created_at is whole seconds): an id resent by a client names the
            # item first stored with it. Rows from before stay NULL, which sorts first. SQLite has no sequence
            # outside a rowid table, so ``sequences`` counts (one UPDATE per write transaction).
            "ALTER TABLE items ADD COLUMN stored INTEGER",
            "CREATE TABLE sequences (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
            "INSERT INTO sequences VALUES ('items', 0)",
            # Secrets every process sharing the store uses: the reasoning.encrypted_content key when the operator
            # gives none (run/server.py).
            "CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL, created_at REAL NOT NULL)",
        ),
    ),
    # The x-request-id of the request that created each response (NULL for rows from before), for support.
    (4, ("ALTER TABLE responses ADD COLUMN request_id TEXT",)),
    # When each process's pid started (run/stored.py ``pid_start``), so that a pid reused by another process is
    # not taken for the process that registered it (NULL for rows from before).
    (5, ("ALTER TABLE processes ADD COLUMN pid_start TEXT",)),
    # Traced responses' traces (tokentrace/): one JSON document each, read through the response's owner.
    (6, ("CREATE TABLE traces (response_id TEXT PRIMARY KEY, data BLOB NOT NULL)",)),
    # The Files API (store/_files.py): one row per uploaded file, its bytes in parts of at most a MiB each
    # (written as the upload streams in, so no upload is ever whole in memory). ``seq`` orders listings;
    # ``status`` is 'uploading' until the last part is in, and only 'uploaded' files are visible.
    (
        7,
        (
            """CREATE TABLE files (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                bytes INTEGER NOT NULL,
                filename TEXT NOT NULL,
                purpose TEXT NOT NULL,
                content_type TEXT,
                expires_at INTEGER,
                status TEXT NOT NULL
            )""",
            "CREATE INDEX files_owner ON files (owner, seq)",
            """CREATE TABLE file_parts (
                file_id TEXT NOT NULL,
                part INTEGER NOT NULL,
                data BLOB NOT NULL,
                PRIMARY KEY (file_id, part)
            ) WITHOUT ROWID""",
        ),
    ),
    # Vector stores (store/_vector_stores.py): the stores, the files attached to each with their ingestion
    # state and the process ingesting them, file batches, and the chunks retrieval searches (FTS5, BM25).
    (
        8,
        (
            """CREATE TABLE vector_stores (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                name TEXT NOT NULL,
                metadata BLOB,
                expires_after BLOB,
                expires_at INTEGER,
                last_active_at INTEGER NOT NULL
            )""",
            "CREATE INDEX vector_stores_owner ON vector_stores (owner, seq)",
            """CREATE TABLE vector_store_files (
                seq INTEGER PRIMARY KEY,
                vector_store_id TEXT NOT NULL,
                file_id TEXT NOT NULL,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                status TEXT NOT NULL,
                last_error BLOB,
                usage_bytes INTEGER NOT NULL,
                chunking BLOB,
                attributes BLOB,
                batch_id TEXT,
                process_id TEXT,
                UNIQUE (vector_store_id, file_id)
            )""",
            "CREATE INDEX vector_store_files_file ON vector_store_files (file_id)",
            "CREATE INDEX vector_store_files_batch ON vector_store_files (batch_id)",
            """CREATE TABLE vector_store_batches (
                id TEXT PRIMARY KEY,
                vector_store_id TEXT NOT NULL,
                owner TEXT NOT NULL,
                created_at INTEGER NOT NULL
            )""",
            """CREATE TABLE chunks (
                id INTEGER PRIMARY KEY,
                vector_store_id TEXT NOT NULL,
                file_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                text TEXT NOT NULL
            )""",
            "CREATE INDEX chunks_file ON chunks (vector_store_id, file_id, position)",
            # An external-content index over chunks.text, kept by the triggers: the text is stored once.
            "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', "
            "tokenize='porter unicode61')",
            """CREATE TRIGGER chunks_added AFTER INSERT ON chunks BEGIN
                INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text);
            END""",
            """CREATE TRIGGER chunks_removed AFTER DELETE ON chunks BEGIN
                INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
            END""",
        ),
    ),
    # Hybrid retrieval (--embeddings): each chunk's vector as the embedding server gave it, float32
    # little-endian (sqlite-vec's format, compared by its vec_distance_cosine), with the model and dimension it
    # came from (a query is compared with vectors of its own model and dimension only). A plain table, so
    # stores opened without sqlite-vec migrate alike; a chunk deleted takes its vector with it.
    (
        9,
        (
            """CREATE TABLE chunk_vectors (
                chunk_id INTEGER PRIMARY KEY,
                model TEXT NOT NULL,
                dims INTEGER NOT NULL,
                data BLOB NOT NULL
            )""",
            """CREATE TRIGGER chunk_vectors_removed AFTER DELETE ON chunks BEGIN
                DELETE FROM chunk_vectors WHERE chunk_id = old.id;
            END""",
        ),
    ),
)

POSTGRES: tuple[Migration, ...] = (
    (
        1,
        (
            """CREATE TABLE processes (
                id TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                started_at DOUBLE PRECISION NOT NULL,
                heartbeat_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE responses (
                id TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                status TEXT NOT NULL,
                background BOOLEAN NOT NULL,
                previous_response_id TEXT,
                conversation_id TEXT,
                process_id TEXT,
                cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
                response BYTEA NOT NULL
            )""",
            "CREATE INDEX responses_active ON responses (status) WHERE status IN ('queued', 'in_progress')",
            "CREATE INDEX responses_created ON responses (created_at)",
            """CREATE TABLE events (
                response_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                last_seq INTEGER NOT NULL,
                data BYTEA NOT NULL,
                PRIMARY KEY (response_id, seq)
            )""",
            """CREATE TABLE items (
                parent TEXT NOT NULL,
                kind TEXT NOT NULL,
                position INTEGER NOT NULL,
                id TEXT NOT NULL,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                data BYTEA NOT NULL,
                PRIMARY KEY (parent, kind, position)
            )""",
            "CREATE INDEX items_id ON items (id)",
            """CREATE TABLE conversations (
                id TEXT PRIMARY KEY,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                metadata BYTEA NOT NULL,
                next_position INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX conversations_updated ON conversations (updated_at)",
        ),
    ),
    (
        2,
        (
            # lz4 instead of pglz for the big values (event-log chunks, the Response as it stands): about as
            # small on disk here (~17x smaller than raw), and with 64 stored streams pglz's CPU in the
            # database took ~10 % of our throughput. A server built without lz4 (or before 14) keeps pglz.
            """DO $$ BEGIN
                EXECUTE 'ALTER TABLE events ALTER COLUMN data SET COMPRESSION lz4';
                EXECUTE 'ALTER TABLE responses ALTER COLUMN response SET COMPRESSION lz4';
            EXCEPTION WHEN feature_not_supported OR syntax_error THEN
                NULL;
            END $$""",
        ),
    ),
    (
        3,
        (
            # See SQLite's version 3: the order items were stored in (existing rows are numbered too, in no
            # particular order among themselves), and the secrets processes share.
            "ALTER TABLE items ADD COLUMN stored BIGINT GENERATED BY DEFAULT AS IDENTITY",
            "CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)",
        ),
    ),
    # See SQLite's version 4.
    (4, ("ALTER TABLE responses ADD COLUMN request_id TEXT",)),
    # See SQLite's version 5.
    (5, ("ALTER TABLE processes ADD COLUMN pid_start TEXT",)),
    # See SQLite's version 6.
    (6, ("CREATE TABLE traces (response_id TEXT PRIMARY KEY, data BYTEA NOT NULL)",)),
    # See SQLite's version 7.
    (
        7,
        (
            """CREATE TABLE files (
                seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                bytes BIGINT NOT NULL,
                filename TEXT NOT NULL,
                purpose TEXT NOT NULL,
                content_type TEXT,
                expires_at BIGINT,
                status TEXT NOT NULL
            )""",
            "CREATE INDEX files_owner ON files (owner, seq)",
            """CREATE TABLE file_parts (
                file_id TEXT NOT NULL,
                part INTEGER NOT NULL,
                data BYTEA NOT NULL,
                PRIMARY KEY (file_id, part)
            )""",
        ),
    ),
    # See SQLite's version 8; full-text search by a generated tsvector (the english configuration) and GIN.
    (
        8,
        (
            """CREATE TABLE vector_stores (
                seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                name TEXT NOT NULL,
                metadata BYTEA,
                expires_after BYTEA,
                expires_at BIGINT,
                last_active_at BIGINT NOT NULL
            )""",
            "CREATE INDEX vector_stores_owner ON vector_stores (owner, seq)",
            """CREATE TABLE vector_store_files (
                seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                vector_store_id TEXT NOT NULL,
                file_id TEXT NOT NULL,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                status TEXT NOT NULL,
                last_error BYTEA,
                usage_bytes BIGINT NOT NULL,
                chunking BYTEA,
                attributes BYTEA,
                batch_id TEXT,
                process_id TEXT,
                UNIQUE (vector_store_id, file_id)
            )""",
            "CREATE INDEX vector_store_files_file ON vector_store_files (file_id)",
            "CREATE INDEX vector_store_files_batch ON vector_store_files (batch_id)",
            """CREATE TABLE vector_store_batches (
                id TEXT PRIMARY KEY,
                vector_store_id TEXT NOT NULL,
                owner TEXT NOT NULL,
                created_at BIGINT NOT NULL
            )""",
            """CREATE TABLE chunks (
                id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                vector_store_id TEXT NOT NULL,
                file_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                text TEXT NOT NULL,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
            )""",
            "CREATE INDEX chunks_file ON chunks (vector_store_id, file_id, position)",
            "CREATE INDEX chunks_tsv ON chunks USING GIN (tsv)",
        ),
    ),
    # See SQLite's version 9: the vectors as REAL[], which needs no extension (a database without pgvector
    # migrates alike); with pgvector they are cast to its vector type when searched.
    (
        9,
        (
            """CREATE TABLE chunk_vectors (
                chunk_id BIGINT PRIMARY KEY REFERENCES chunks (id) ON DELETE CASCADE,
                model TEXT NOT NULL,
                dims INTEGER NOT NULL,
                data REAL[] NOT NULL
            )""",
        ),
    ),
)

LATEST = SQLITE[-1][0]
assert LATEST == POSTGRES[-1][0], "both databases must be at the same schema version"
