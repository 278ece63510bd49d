"""An OpenAI-compatible ``/v1/embeddings`` server as file_search uses it (``--embeddings URL``).

Any server that answers ``POST /v1/embeddings`` with ``{"input": [...], "model": ...}`` → ``{"data":
[{"index", "embedding"}]}`` will do: vLLM (``--task embed``), llama.cpp's ``llama-server --embedding``, Hugging
Face's text-embeddings-inference. Chunks are sent ``BATCH`` at a time; the answer's vectors are put back in
the order of the inputs by their ``index`` and kept as float32 arrays (a file of 10,000 chunks of 1,024
dimensions holds 40 MB of them until it is stored, not the 250 MB of Python floats). The model sent is
``--embeddings-model``, else the first model the server's ``/v1/models`` lists (llama.cpp and TEI ignore it;
vLLM wants the name it serves); a server that lists none, or has no ``/v1/models``, is sent no model.

A failure (the server unreachable, an HTTP error, an answer that is not vectors of one dimension) is
``EmbeddingsError``. ``embed`` tries a request ``len(RETRY_DELAYS) + 1`` times, waiting those delays between
tries, since an embedding server restarting or busy is usually back in seconds; callers decide what a failure
after that means (an ingestion ends ``failed``; a search falls back to full text).
"""

from __future__ import annotations

import asyncio
import logging
import math
from array import array
from collections.abc import Sequence
from typing import Any

import httpx

__all__ = ["BATCH", "Embeddings", "EmbeddingsError"]

logger = logging.getLogger("harmony_responses.file_search")

BATCH = 64  # inputs per request: vLLM, llama.cpp and TEI (max_client_batch_size 32 by default) take this many
RETRY_DELAYS: tuple[float, ...] = (0.5, 2.0)
TIMEOUT = httpx.Timeout(120.0, connect=10.0)


class EmbeddingsError(Exception):
    """The embedding server did not give the vectors asked for (after retrying)."""


def embeddings_url(url: str) -> str:
    """``--embeddings``: a server's base URL (``http://host:8080``), its ``/v1``, or the endpoint itself."""
    base = url.strip().rstrip("/")
    if base.endswith("/embeddings"):
        return base
    if base.endswith("/v1"):
        return base + "/embeddings"
    return base + "/v1/embeddings"


class Embeddings:
    """The embedding server at ``url``; ``model`` is sent as ``model`` (None: the server's first listed one).
    The vectors' dimension is whatever its answers hold: each stored vector keeps its own (``chunk_vectors``)."""

    def __init__(self, url: str, model: str | None = None, *, api_key: str | None = None) -> None:
        self.url = embeddings_url(url)
        self.model = model
        self._api_key = api_key
        self._client: httpx.AsyncClient | None = None
        self._model_lock = asyncio.Lock()

    def describe(self) -> str:
        return f"{self.url} (model {self.model or 'as the server lists it'})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else None
            self._client = httpx.AsyncClient(timeout=TIMEOUT, headers=headers, trust_env=False)
        return self._client

    async def model_name(self) -> str | None:
        """The model sent: ``--embeddings-model``, else the first id of the server's ``/v1/models`` (asked once;
        None when it lists none, and then no ``model`` is sent)."""
        if self.model is not None:
            return self.model
        async with self._model_lock:
            if self.model is None:
                models_url = self.url.rsplit("/", 1)[0] + "/models"
                try:
                    answer = await self._http().get(models_url)
                    answer.raise_for_status()
                    listed = answer.json().get("data") or []
                    self.model = str(listed[0]["id"]) if listed else ""
                except httpx.TransportError as exc:  # not up yet: asked again next time
                    raise EmbeddingsError(f"{models_url}: {type(exc).__name__}: {exc}") from None
                except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
                    logger.info("the embedding server lists no model (%s): none is sent", exc)
                    self.model = ""
        return self.model or None

    async def embed(self, texts: Sequence[str]) -> list[array[float]]:
        """One vector per text (float32), in order, ``BATCH`` texts per request; raises ``EmbeddingsError``."""
        vectors: list[array[float]] = []
        for start in range(0, len(texts), BATCH):
            vectors.extend(await self._batch(list(texts[start : start + BATCH])))
        return vectors

    async def _batch(self, texts: list[str]) -> list[array[float]]:
        failure = ""
        for delay in (*RETRY_DELAYS, None):
            try:
                return await self._request(texts)
            except EmbeddingsError as exc:
                failure = str(exc)
            if delay is None:
                break
            logger.warning("the embedding server failed (%s); trying again in %gs", failure, delay)
            await asyncio.sleep(delay)
        raise EmbeddingsError(failure)

    async def _request(self, texts: list[str]) -> list[array[float]]:
        body: dict[str, Any] = {"input": texts, "encoding_format": "float"}
        model = await self.model_name()
        if model:
            body["model"] = model
        try:
            answer = await self._http().post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise EmbeddingsError(f"{self.url}: {type(exc).__name__}: {exc}") from None
        if answer.status_code != 200:
            raise EmbeddingsError(f"{self.url} answered {answer.status_code}: {answer.text[:300]}")
        try:
            data = answer.json()["data"]
            ordered = sorted(data, key=lambda d: int(d.get("index", 0)))
            vectors = [array("f", d["embedding"]) for d in ordered]
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise EmbeddingsError(f"{self.url} answered no embeddings: {type(exc).__name__}: {exc}") from None
        if len(vectors) != len(texts):
            raise EmbeddingsError(f"{self.url} answered {len(vectors)} embeddings for {len(texts)} inputs")
        sizes = {len(v) for v in vectors}
        if len(sizes) != 1 or 0 in sizes or not all(math.isfinite(x) for v in vectors for x in v):
            raise EmbeddingsError(f"{self.url} answered embeddings of no single dimension, or not finite")
        return vectors

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
