"""Vectors for chunks stored without one: files ingested before ``--embeddings`` was given get theirs later.

With an embedding server, the store's maintenance (at each heartbeat) starts ``Backfill.run`` in a task of
its own when none runs, so a slow embedding server never holds up the heartbeat: it embeds the chunks of
completed files that have no vector, ``BATCH`` at a time, at most ``BATCHES`` batches a round, oldest first,
and stores them (a chunk another process filled meanwhile, or one deleted, is left alone). Until a file's
chunks have vectors it is found by its words only. An embedding server that fails leaves the rest for a later
round (said in the log at most every ``QUIET`` seconds).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..tools.file_search import Embeddings, EmbeddingsError
from ..tools.file_search._embeddings import BATCH
from .vector_stores import VectorStoreService

__all__ = ["Backfill"]

logger = logging.getLogger("harmony_responses.file_search")

BATCHES = 16
QUIET = 60.0


class Backfill:
    """See the module docstring; ``kick`` is the maintenance's hook, ``aclose`` stops a round under way."""

    def __init__(self, service: VectorStoreService) -> None:
        self.service = service
        self._task: asyncio.Task[None] | None = None
        self._warned_at: float | None = None
        self.filled = 0  # vectors stored so far

    async def kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="embeddings-backfill")

    async def run(self) -> None:
        embeddings: Embeddings | None = self.service.embeddings
        if embeddings is None:
            return
        try:
            for _ in range(BATCHES):
                chunks = await self.service.stores.chunks_without_vectors(BATCH)
                if not chunks:
                    return
                vectors = await embeddings.embed([text for _, text in chunks])
                model = await embeddings.model_name() or ""
                pairs = [(chunk_id, vector) for (chunk_id, _), vector in zip(chunks, vectors, strict=True)]
                await self.service.stores.add_vectors(pairs, model)
                self.filled += len(pairs)
        except EmbeddingsError as exc:
            self._warn("embedding the chunks stored without vectors failed (tried again later): %s", exc)
        except Exception as exc:  # the store failing: the next round tries again
            self._warn("storing the vectors of chunks stored without them failed: %s: %s", type(exc).__name__, exc)

    def _warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= QUIET:
            self._warned_at = now
            logger.warning(message, *args)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
