"""Vector stores as the server runs them: objects in the API's shapes, ingestion in the background, search.

Ingestion: attaching a file makes its row ``in_progress``, held by this process (its lease in ``processes``),
and starts a task here that reads the file's bytes, extracts its text and chunks it (in a thread: both are
CPU work) and ends the row ``completed`` with its chunks, or ``failed`` with ``last_error``
(``unsupported_file``, ``invalid_file``, ``server_error``) — in one transaction that writes nothing if the
file was detached or re-attached meanwhile. A process that dies (or stops) mid-ingestion leaves rows
``in_progress`` under a process whose lease has lapsed: the store's maintenance in every process (``upkeep``,
at each heartbeat) and every vector-store request, at most every ``RECOVER_EVERY`` seconds, take such rows
over and ingest them again from the start, so none is left ``in_progress`` for good. ``upkeep`` also applies
``--retention`` to files and vector stores and drops what belongs to no file or store any more.

Search (``search``): each query's words (``store.query_terms``) against the chunks of the stores' completed
files that pass ``filters`` (run in Python over the files' attributes, ``tools/file_search/_filters.py``),
ranked by each store's full-text ranking (BM25 on SQLite), the best ``max_num_results`` over all queries,
those under ``score_threshold`` dropped. ``rewrite_query`` is accepted and does nothing: the query is searched
as written (``search_query`` echoes it), since rewriting would need a model call the caller did not ask for.

Hybrid retrieval (``--embeddings URL``, when the store can rank by vectors: ``store.use_vectors``): ingestion
embeds a file's chunks (``tools/file_search/_embeddings.py``, in batches, retried) and stores the vectors with
the chunks; an embedding server still failing after its retries ends the file ``failed`` with
``server_error`` and the server's answer in ``last_error`` (attach it again to retry), never a 5xx to anyone.
A search embeds its queries (one request) and fuses, for each query, the full-text ranking and the vector
ranking of the candidate chunks (``DEPTH`` of each) by reciprocal rank fusion weighted by
``ranking_options.hybrid_search`` (``tools/file_search/_ranking.py``); a chunk's score is its best over the
queries. When the embedding server fails a search, that search ranks by full text alone (logged). Files
ingested before ``--embeddings`` get their vectors in the background (``backfill.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import APIError
from ..ids import random_id
from ..request.validate import check_metadata, string_too_long
from ..store import (
    Chunk,
    FileStore,
    Hit,
    VectorStoreFile,
    VectorStoreRecord,
    VectorStores,
    files_of,
    query_terms,
    vector_stores_of,
)
from ..tools.file_search import (
    MAX_INGEST_BYTES,
    ChunkingError,
    Embeddings,
    EmbeddingsError,
    FilterError,
    HybridError,
    Unsupported,
    check_filter,
    chunk_text,
    extract_text,
    fuse,
    hybrid_weights,
    matches,
    parse_chunking,
)

if TYPE_CHECKING:
    from .server import Server

__all__ = ["VectorStoreFile", "VectorStoreRecord", "VectorStoreService", "vector_store_service"]

logger = logging.getLogger("harmony_responses.file_search")

RECOVER_EVERY = 5.0
PURGE_EVERY = 60.0  # at most; with --retention R, every R/2 when that is shorter (as responses are purged)
LEASE_LAPSED = 30.0  # seconds without a heartbeat (every 2 s) after which a process is taken for gone
MAX_ATTRIBUTES = 16
MAX_RESULTS = 50
DEFAULT_RESULTS = 10
MAX_QUERIES = 10
DEPTH = 50  # candidates each ranking brings to the fusion, per query
STATUSES = ("in_progress", "completed", "failed", "cancelled")


def no_vector_store(store_id: str) -> APIError:
    return APIError(f"No vector store found with id '{store_id}'.", status=404)


def no_such_file(file_id: str) -> APIError:
    return APIError(f"No such File object: {file_id}", status=404, param="file_id")


def check_attributes(value: Any, param: str = "attributes") -> dict[str, Any] | None:
    """Files' ``attributes``: at most 16 keys of up to 64 characters; strings (up to 512), numbers, booleans."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise APIError(f"Invalid type for '{param}': expected an object.", param=param, code="invalid_type")
    if len(value) > MAX_ATTRIBUTES:
        raise APIError(f"Invalid '{param}': at most {MAX_ATTRIBUTES} keys.", param=param, code="invalid_value")
    for key, item in value.items():
        if len(key) > 64:
            raise APIError(f"Invalid '{param}': keys are at most 64 characters.", param=param, code="invalid_value")
        if isinstance(item, str) and len(item) > 512:
            raise APIError(f"Invalid '{param}.{key}': at most 512 characters.", param=f"{param}.{key}")
        if not isinstance(item, (str, int, float, bool)):
            raise APIError(
                f"Invalid type for '{param}.{key}': expected a string, number or boolean.",
                param=f"{param}.{key}",
                code="invalid_type",
            )
    return value


def hybrid_option(value: Any, param: str) -> tuple[float, float] | None:
    """``ranking_options.hybrid_search`` as ``(embedding_weight, text_weight)`` (None: not given); a 400 when
    the weights are not non-negative numbers, or both 0."""
    try:
        return hybrid_weights(value, param)
    except HybridError as exc:
        raise APIError(str(exc), param=exc.param, code="invalid_value") from None


def chunking(value: Any, param: str = "chunking_strategy") -> dict[str, Any]:
    try:
        return parse_chunking(value, param)
    except ChunkingError as exc:
        raise APIError(str(exc), param=exc.param, code="invalid_value") from None


def expiry(value: Any) -> dict[str, Any] | None:
    """``expires_after``: ``{"anchor": "last_active_at", "days": 1..365}``."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("anchor") != "last_active_at":
        raise APIError(
            "Invalid 'expires_after': expected anchor 'last_active_at'.",
            param="expires_after.anchor",
            code="invalid_value",
        )
    days = value.get("days")
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= 365:
        raise APIError(
            "Invalid 'expires_after.days': expected an integer between 1 and 365.",
            param="expires_after.days",
            code="invalid_value",
        )
    return {"anchor": "last_active_at", "days": days}


def _expires_at(record: VectorStoreRecord) -> int | None:
    if record.expires_after is None:
        return None
    return record.last_active_at + int(record.expires_after["days"]) * 86400


def _counts(found: dict[str, int]) -> dict[str, int]:
    counts = {status: found.get(status, 0) for status in STATUSES}
    counts["total"] = sum(counts.values())
    return counts


def file_object(row: VectorStoreFile) -> dict[str, Any]:
    return {
        "id": row.file_id,
        "object": "vector_store.file",
        "created_at": row.created_at,
        "vector_store_id": row.vector_store_id,
        "status": row.status,
        "last_error": row.last_error,
        "usage_bytes": row.usage_bytes,
        "attributes": row.attributes,
        "chunking_strategy": row.chunking,
    }


class VectorStoreService:
    """The server's vector stores; see the module docstring."""

    def __init__(self, server: Server) -> None:
        self.server = server
        # This process's ingestions by (vector store, file): a file attached again, detached or cancelled stops
        # its running ingestion here, which would otherwise end the new row (same process, also in_progress)
        # with the old one's chunks. Another process's ingestion is told apart by its holder (finish_file).
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._recovered_at: float | None = None
        self._purged_at: float | None = None

    @property
    def stores(self) -> VectorStores:
        return vector_stores_of(self.server.stored.store)

    @property
    def files(self) -> FileStore:
        return files_of(self.server.stored.store)

    @property
    def process_id(self) -> str:
        return self.server.stored.process.id

    @property
    def embeddings(self) -> Embeddings | None:
        """The embedding server, when there is one and the store can rank by vectors (else None: full text)."""
        embeddings: Embeddings | None = getattr(self.server, "embeddings", None)
        return embeddings if embeddings is not None and self.stores.vectors is not None else None

    # ------------------------------------------------------------------ objects

    async def store_object(self, record: VectorStoreRecord) -> dict[str, Any]:
        found, usage = await self.stores.counts(record.id)
        expires_at = _expires_at(record)
        if expires_at is not None and expires_at <= time.time():
            status = "expired"
        else:
            status = "in_progress" if found.get("in_progress") else "completed"
        return {
            "id": record.id,
            "object": "vector_store",
            "created_at": record.created_at,
            "name": record.name,
            "metadata": record.metadata,
            "status": status,
            "usage_bytes": usage,
            "file_counts": _counts(found),
            "last_active_at": record.last_active_at,
            "expires_after": record.expires_after,
            "expires_at": expires_at,
        }

    async def batch_object(self, batch_id: str, store_id: str, created_at: int) -> dict[str, Any]:
        counts = _counts(await self.stores.batch_counts(batch_id))
        if counts["in_progress"]:
            status = "in_progress"
        elif counts["cancelled"]:
            status = "cancelled"
        elif counts["failed"] and not counts["completed"]:
            status = "failed"
        else:
            status = "completed"
        return {
            "id": batch_id,
            "object": "vector_store.files_batch",
            "created_at": created_at,
            "vector_store_id": store_id,
            "status": status,
            "file_counts": counts,
        }

    # ------------------------------------------------------------------ stores

    async def get(self, store_id: str, owner: str) -> VectorStoreRecord:
        await self.recover()
        record = await self.stores.get(store_id, owner)
        if record is None:
            raise no_vector_store(store_id)
        return record

    async def create(self, owner: str, body: dict[str, Any]) -> VectorStoreRecord:
        await self.recover()
        name = _name(body.get("name"))
        check_metadata(body)
        file_ids = self._file_ids(body.get("file_ids"), "file_ids")
        strategy = chunking(body.get("chunking_strategy"))
        now = int(time.time())
        record = VectorStoreRecord(
            id=random_id("vs"),
            owner=owner,
            created_at=now,
            name=name or "",
            metadata=body.get("metadata") or {},
            expires_after=expiry(body.get("expires_after")),
            expires_at=None,
            last_active_at=now,
        )
        for file_id in file_ids:  # every file must be the caller's before anything is made
            await self._owned_file(file_id, owner)
        await self.stores.create(record)
        for file_id in file_ids:
            await self._attach(record, file_id, strategy, None, None)
        return record

    async def update(self, record: VectorStoreRecord, body: dict[str, Any]) -> VectorStoreRecord:
        name = _name(body.get("name", record.name))
        check_metadata(body)
        updated = VectorStoreRecord(
            id=record.id,
            owner=record.owner,
            created_at=record.created_at,
            name=name or "",
            metadata=body["metadata"] if body.get("metadata") is not None else record.metadata,
            expires_after=expiry(body["expires_after"]) if "expires_after" in body else record.expires_after,
            expires_at=None,
            last_active_at=int(time.time()),
        )
        await self.stores.update(updated)
        return updated

    # ------------------------------------------------------------------ files

    @staticmethod
    def _file_ids(value: Any, param: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise APIError(f"Invalid '{param}': expected an array of file ids.", param=param, code="invalid_type")
        if len(value) > 500:
            raise APIError(f"Invalid '{param}': at most 500 files at once.", param=param, code="invalid_value")
        return list(dict.fromkeys(value))

    async def _owned_file(self, file_id: str, owner: str) -> None:
        if await self.files.get(file_id, owner) is None:
            raise no_such_file(file_id)

    async def attach(self, record: VectorStoreRecord, body: dict[str, Any]) -> VectorStoreFile:
        file_id = body.get("file_id")
        if not isinstance(file_id, str) or not file_id:
            raise APIError("Missing required parameter: 'file_id'.", param="file_id", code="missing_required_parameter")
        strategy = chunking(body.get("chunking_strategy"))
        attributes = check_attributes(body.get("attributes"))
        await self._owned_file(file_id, record.owner)
        return await self._attach(record, file_id, strategy, attributes, None)

    async def attach_batch(self, record: VectorStoreRecord, body: dict[str, Any]) -> str:
        """Attach ``file_ids`` (or ``files``, each with its own attributes and strategy) as one batch; its id."""
        shared = chunking(body.get("chunking_strategy"))
        attributes = check_attributes(body.get("attributes"))
        entries: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        if body.get("files") is not None:
            files = body["files"]
            if not isinstance(files, list) or not files:
                raise APIError("Invalid 'files': expected a non-empty array.", param="files", code="invalid_type")
            for i, entry in enumerate(files):
                if not isinstance(entry, dict) or not isinstance(entry.get("file_id"), str):
                    raise APIError(f"Invalid 'files[{i}]': expected an object with a file_id.", param=f"files[{i}]")
                strategy = (
                    chunking(entry["chunking_strategy"], f"files[{i}].chunking_strategy")
                    if entry.get("chunking_strategy")
                    else shared
                )
                entries.append(
                    (entry["file_id"], strategy, check_attributes(entry.get("attributes"), f"files[{i}].attributes"))
                )
        else:
            file_ids = self._file_ids(body.get("file_ids"), "file_ids")
            if not file_ids:
                raise APIError(
                    "Missing required parameter: 'file_ids'.", param="file_ids", code="missing_required_parameter"
                )
            entries = [(file_id, shared, attributes) for file_id in file_ids]
        for file_id, _, _ in entries:
            await self._owned_file(file_id, record.owner)
        batch_id = random_id("vsfb")
        await self.stores.create_batch(batch_id, record.id, record.owner, int(time.time()))
        for file_id, strategy, file_attributes in entries:
            await self._attach(record, file_id, strategy, file_attributes, batch_id)
        return batch_id

    async def _attach(
        self,
        record: VectorStoreRecord,
        file_id: str,
        strategy: dict[str, Any],
        attributes: dict[str, Any] | None,
        batch_id: str | None,
    ) -> VectorStoreFile:
        row = VectorStoreFile(
            vector_store_id=record.id,
            file_id=file_id,
            owner=record.owner,
            created_at=int(time.time()),
            status="in_progress",
            last_error=None,
            usage_bytes=0,
            chunking=strategy,
            attributes=attributes,
            batch_id=batch_id,
        )
        await self.stores.attach(row, self.process_id)
        self._start(row)
        return row

    async def get_file(self, record: VectorStoreRecord, file_id: str) -> VectorStoreFile:
        row = await self.stores.get_file(record.id, file_id, record.owner)
        if row is None:
            raise APIError(f"No file found with id '{file_id}' in vector store '{record.id}'.", status=404)
        return row

    async def forget_file(self, file_id: str, owner: str) -> None:
        """A deleted file leaves every vector store (its ingestion, if running, then writes nothing)."""
        for store_id, running in list(self._running):
            if running == file_id:
                self.stop(store_id, file_id)
        await self.stores.forget_file(file_id, owner)

    # ------------------------------------------------------------------ ingestion

    def _start(self, row: VectorStoreFile) -> None:
        key = (row.vector_store_id, row.file_id)
        self.stop(*key)
        task = asyncio.get_running_loop().create_task(self._ingest(row, self.process_id))
        self._running[key] = task
        task.add_done_callback(lambda done: self._running.pop(key, None) if self._running.get(key) is done else None)

    def stop(self, store_id: str, file_id: str) -> None:
        """Stop this process's ingestion of the file into the store, if one runs."""
        task = self._running.pop((store_id, file_id), None)
        if task is not None:
            task.cancel()

    async def cancel_batch(self, store_id: str, batch_id: str) -> None:
        """The batch's files still in progress end ``cancelled`` (their ingestions here stopped)."""
        page = await self.stores.list_files(store_id, after=None, limit=10_000, order="asc", batch_id=batch_id)
        for row in page[0] if page is not None else ():
            if row.status == "in_progress":
                self.stop(store_id, row.file_id)
        await self.stores.cancel_batch(batch_id)

    async def detach(self, store_id: str, file_id: str) -> bool:
        self.stop(store_id, file_id)
        return await self.stores.detach(store_id, file_id)

    async def _ingest(self, row: VectorStoreFile, holder: str) -> None:
        chunks: list[str] = []
        vectors: Sequence[Sequence[float]] = []
        model = ""
        error: dict[str, Any] | None = None
        try:
            record = await self.files.get(row.file_id, row.owner)
            if record is None:
                error = {"code": "invalid_file", "message": "The file was deleted before it was ingested."}
            elif record.bytes > MAX_INGEST_BYTES:
                error = {
                    "code": "invalid_file",
                    "message": f"The file is larger than the {MAX_INGEST_BYTES} bytes a vector store ingests.",
                }
            else:
                data = b"".join([part async for part in self.files.content(record)])
                text = await asyncio.to_thread(extract_text, record.filename, record.content_type, data)
                chunks = await asyncio.to_thread(chunk_text, text, row.chunking)
                embeddings = self.embeddings
                if embeddings is not None and chunks:
                    vectors = await embeddings.embed(chunks)
                    model = await embeddings.model_name() or ""  # known once it answered
        except Unsupported as exc:
            error = {"code": exc.code, "message": str(exc)}
        except EmbeddingsError as exc:
            logger.warning("embedding the chunks of %s failed: %s", row.file_id, exc)
            error = {"code": "server_error", "message": f"The embedding server failed: {exc}"}
            chunks = []
        except asyncio.CancelledError:
            raise  # the server stops: the row stays in_progress, and the next process resumes it
        except Exception as exc:
            logger.exception("ingesting %s into %s failed", row.file_id, row.vector_store_id)
            error = {"code": "server_error", "message": f"The file could not be ingested: {type(exc).__name__}."}
        usage = sum(len(c.encode()) for c in chunks)
        try:
            await self.stores.finish_file(
                row.vector_store_id,
                row.file_id,
                holder,
                chunks=[Chunk(i, c) for i, c in enumerate(chunks)],
                usage_bytes=usage,
                last_error=error,
                vectors=vectors,
                model=model,
            )
        except Exception as exc:
            logger.exception("storing the chunks of %s failed", row.file_id)
            if chunks or error is None:
                # A value the store refuses (not the store gone: then this fails too, and the row's lease
                # lapses with this process) must not leave the file in_progress while this process lives.
                failed = {
                    "code": "server_error",
                    "message": f"The file's chunks could not be stored: {type(exc).__name__}.",
                }
                try:
                    await self.stores.finish_file(
                        row.vector_store_id, row.file_id, holder, chunks=[], usage_bytes=0, last_error=failed
                    )
                except Exception:
                    logger.exception("marking %s failed failed too", row.file_id)

    async def recover(self) -> None:
        """Take over and resume the ingestions of processes that are gone (at most every RECOVER_EVERY s)."""
        now = time.monotonic()
        if self._recovered_at is not None and now - self._recovered_at < RECOVER_EVERY:
            return
        self._recovered_at = now
        for row, holder in await self.stores.stale_ingestions(LEASE_LAPSED):
            if holder == self.process_id:
                continue
            if await self.stores.take_over(row.vector_store_id, row.file_id, holder, self.process_id):
                logger.info(
                    "resuming the ingestion of %s into %s (its process is gone)", row.file_id, row.vector_store_id
                )
                self._start(row)

    async def upkeep(self) -> None:
        """Run at every heartbeat of the store's maintenance (``StoredResponses.periodic``): resume ingestions a
        gone process left, sweep expired files and stale uploads, and drop what belongs to no file or store any
        more; with ``--retention``, files uploaded and stores not active for that long are deleted, as
        responses are."""
        await self.recover()
        await self.files.tidy()
        retention = self.server.stored.retention
        every = min(PURGE_EVERY, retention / 2) if retention else PURGE_EVERY
        now = time.monotonic()
        if self._purged_at is not None and now - self._purged_at < every:
            return
        self._purged_at = now
        before = time.time() - retention if retention else None
        files = await self.files.purge(before) if before is not None else 0
        stores = await self.stores.purge(before)
        if files or stores:
            logger.info("retention: deleted %d files and %d vector stores", files, stores)

    async def aclose(self) -> None:
        """Stop this process's ingestions (the server stops): they are resumed by the next process."""
        tasks = list(self._running.values())
        self._running.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ search

    async def search(
        self,
        owner: str,
        store_ids: Sequence[str],
        queries: Sequence[str],
        *,
        filters: dict[str, Any] | None = None,
        max_num_results: int = DEFAULT_RESULTS,
        score_threshold: float = 0.0,
        hybrid: tuple[float, float] | None = None,
    ) -> list[dict[str, Any]]:
        """The results (``VectorStoreSearchResponse`` shapes), best first; ``hybrid`` is ``(embedding_weight,
        text_weight)`` (default 1 and 1), used when there are embeddings."""
        for store_id in store_ids:
            await self.get(store_id, owner)
        if filters is not None:
            try:
                check_filter(filters)
            except FilterError as exc:
                raise APIError(str(exc), param=exc.param, code="invalid_value") from None
        candidates = await self.stores.completed_files(store_ids)
        attributes = {(s, f): a for s, f, a in candidates if filters is None or matches(filters, a)}
        pairs = list(attributes)
        vectors = await self._query_vectors(queries) if pairs else None
        best: dict[tuple[str, str, int], Any] = {}
        for i, query in enumerate(queries):
            if vectors is None:
                found = await self.stores.search(pairs, query_terms(query), max_num_results)
            else:
                found = await self._hybrid(pairs, query, vectors[0], vectors[1][i], hybrid or (1.0, 1.0))
            for hit in found:
                key = (hit.vector_store_id, hit.file_id, hit.position)
                if key not in best or best[key].score < hit.score:
                    best[key] = hit
        hits = sorted(best.values(), key=lambda h: (-h.score, h.file_id, h.position))
        hits = [h for h in hits if h.score >= score_threshold][:max_num_results]
        names: dict[str, str] = {}
        for hit in hits:
            if hit.file_id not in names:
                record = await self.files.get(hit.file_id, owner)
                names[hit.file_id] = record.filename if record is not None else ""
        if store_ids:
            await self.stores.touch(store_ids, int(time.time()))
        return [
            {
                "file_id": h.file_id,
                "filename": names[h.file_id],
                "score": round(h.score, 6),
                "attributes": attributes.get((h.vector_store_id, h.file_id)),
                "content": [{"type": "text", "text": h.text}],
            }
            for h in hits
        ]

    async def _query_vectors(self, queries: Sequence[str]) -> tuple[str, Sequence[Sequence[float]]] | None:
        """``(model, one vector per query)``, or None: no embeddings, or the server failed (full text then)."""
        embeddings = self.embeddings
        if embeddings is None:
            return None
        try:
            vectors = await embeddings.embed(list(queries))
            return await embeddings.model_name() or "", vectors
        except EmbeddingsError as exc:
            logger.warning("embedding a search's queries failed, so it ranks by full text only: %s", exc)
            return None

    async def _hybrid(
        self,
        pairs: list[tuple[str, str]],
        query: str,
        model: str,
        vector: Sequence[float],
        weights: tuple[float, float],
    ) -> list[Hit]:
        """One query's chunks, full-text and vector rankings fused (``score``: the fused score in (0, 1])."""
        embedding_weight, text_weight = weights
        text = await self.stores.search(pairs, query_terms(query), DEPTH) if text_weight > 0 else []
        near = await self.stores.vector_search(pairs, vector, model, DEPTH) if embedding_weight > 0 else []
        hits = {(h.vector_store_id, h.file_id, h.position): h for h in (*near, *text)}
        fused = fuse(
            [
                (text_weight, [(h.vector_store_id, h.file_id, h.position) for h in text]),
                (embedding_weight, [(h.vector_store_id, h.file_id, h.position) for h in near]),
            ]
        )
        return [dataclasses.replace(hits[key], score=score) for key, score in fused.items()]  # type: ignore[index]


def vector_store_service(server: Server) -> VectorStoreService:
    """The server's ``VectorStoreService`` (made on first use)."""
    existing: VectorStoreService | None = getattr(server, "_vector_store_service", None)
    if existing is None:
        existing = VectorStoreService(server)
        server._vector_store_service = existing  # type: ignore[attr-defined]
    return existing


MAX_NAME = 256  # OpenAI documents none; a name is a label, and is stored and listed with every store


def _name(name: Any) -> str | None:
    """A vector store's ``name``: a string of at most ``MAX_NAME`` characters without NUL (PostgreSQL stores
    no NUL in text), or None."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise APIError("Invalid type for 'name': expected a string.", param="name", code="invalid_type")
    if len(name) > MAX_NAME:
        raise string_too_long("name", MAX_NAME, len(name))
    if "\x00" in name:
        raise APIError("Invalid 'name': the string contains a NUL character.", param="name", code="invalid_value")
    return name
