"""``Server``: what the HTTP layer calls, and everything a running response needs, started and stopped together.

It holds the engines (one per served model name; several names may share one), the Harmony vocabulary, the
reasoning sealer, the built-in tools (code interpreter containers, web search, MCP options), the stored
responses and the conversations. ``start()`` (in the app's lifespan) loads the vocabulary (about a second,
once per process), starts the engines (for real engines, the start-up check that it is reachable and serves
Harmony), probes the sandbox and opens the store (migrations, this process's lease, ending what a crashed
process left running, and the sealing key every process using the store shares); ``aclose()`` ends what still
runs, failed with a reason, and closes it all.

Each model's engine has its own context window (``--context-window`` lowered to what that engine reported), so
a run is fitted to the engine it runs on. ``readiness()`` probes every engine (cached for a second, one probe
at a time) and asks the store's maintenance whether its writes fail, for ``GET /ready``.

``create_response`` is the one way a response begins: a ``ResponseRequest`` in, and out what the
transport serves: a ``ResponseRun`` (not stored), a ``StoredRun`` (stored, foreground) or a
``Background`` (queued; the POST answers at once).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
import weakref
from collections.abc import Mapping
from typing import Any

import anyio.to_thread

from .. import tracing
from ..engine import Engine, EngineError, EngineHealth
from ..errors import APIError, shutting_down
from ..ids import random_id
from ..request import ReasoningSealer, ResponseRequest
from ..request.sealed import COMPACTION
from ..store import StoreError
from ..tokentrace import TraceOptions
from ..tools.browser import WebSearch
from ..tools.code_interpreter import ContainerManager
from ..tools.file_search import Embeddings
from ..tools.mcp import McpOptions
from ..translate import response_skeleton, usage_object
from ..vocab import Vocabulary, load_encoding, load_vocabulary
from .backfill import Backfill
from .compact import compacted_output, write_summary
from .conversations import Conversations
from .live import StoredRun
from .loop import ResponseRun
from .start import Prompting, build_compact, build_run, count_input_tokens
from .stored import Background, StoredResponses
from .vector_stores import vector_store_service

__all__ = ["Server"]

logger = logging.getLogger("harmony_responses.run")

SEALING_SECRET = "reasoning.encrypted_content"  # the store's secrets row the sealing key comes from
# Readiness: a probe's answer is reused for this long (a burst of probes reaches each engine once), and an
# engine that takes longer than READY_TIMEOUT to answer its probe counts as not ready (replicas have their
# own, shorter bound each: engine/_replicas.py).
READY_CACHE_SECONDS = 1.0
READY_TIMEOUT = 10.0


class Server:
    """See the module docstring.

    Args:
        engines: model name → the engine its responses run on, in the order ``/v1/models`` lists them (the
            first is the default); several names may share one engine.
        stored: the stored responses (and the store behind them).
        sealer: seals and opens ``reasoning.encrypted_content``.
        prompting: what every prompt is rendered with.
        containers: the code interpreter's containers.
        web_search: the search backend (None: ``web_search`` is not offered to the model).
        mcp: remote MCP options (allowed hosts, stdio servers, timeout).
        trace: which stored responses keep a per-token trace (``tokentrace``; default: none).
        embeddings: the ``--embeddings`` server file_search's hybrid ranking embeds with (None: full text).
    """

    def __init__(
        self,
        *,
        engines: Mapping[str, Engine],
        stored: StoredResponses,
        sealer: ReasoningSealer,
        prompting: Prompting,
        containers: ContainerManager,
        web_search: WebSearch | None,
        mcp: McpOptions,
        trace: TraceOptions | None = None,
        embeddings: Embeddings | None = None,
    ) -> None:
        assert engines, "a Server needs at least one model"
        self.models = tuple(engines)
        self.engines = dict(engines)
        self.stored = stored
        self.conversations = Conversations(stored)
        self.sealer = sealer
        self.prompting = prompting
        self.containers = containers
        self.web_search = web_search
        self.mcp = mcp
        self.trace = trace if trace is not None and (trace.every or trace.header) else None
        self.embeddings = embeddings
        self._backfill: Backfill | None = None  # vectors for chunks stored without (with embeddings)
        self.vocab: Vocabulary | None = None
        self.started_at = int(time.time())
        self.startup_error: Exception | None = None  # why start() failed, for the command line's last word
        self.closing = False
        self._runs: weakref.WeakSet[ResponseRun] = weakref.WeakSet()
        self._prompting: dict[int, Prompting] = {}  # id(engine) → prompting bounded by its context
        self._ready: tuple[float, tuple[bool, dict[str, Any]]] | None = None
        self._ready_probe: asyncio.Task[tuple[bool, dict[str, Any]]] | None = None

    @property
    def engine(self) -> Engine:
        """The default model's engine."""
        return self.engines[self.models[0]]

    def _distinct_engines(self) -> list[Engine]:
        return list({id(e): e for e in self.engines.values()}.values())

    def route(self, model: str) -> tuple[Engine, Prompting]:
        """The engine ``model``'s responses run on and the prompting (context) they are rendered with."""
        engine = self.engines[model]
        return engine, self._prompting.get(id(engine), self.prompting)

    async def start(self) -> None:
        """Raises ``EngineError`` or ``StoreError`` (also kept in ``startup_error``) when it cannot serve."""
        self.vocab = await anyio.to_thread.run_sync(load_vocabulary)
        await anyio.to_thread.run_sync(load_encoding)
        engines = self._distinct_engines()
        results = await asyncio.gather(*(e.start() for e in engines), return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            for engine, result in zip(engines, results, strict=True):
                if result is None:
                    await engine.aclose()
            if isinstance(failed, EngineError):
                self.startup_error = failed
                # The command line says it in one line (serve/cli.py); the traceback is for --log-level debug.
                logger.debug("the engine cannot serve: %s", failed, exc_info=failed)
            raise failed
        for engine in engines:
            self._prompting[id(engine)] = self._bound_context(engine)
        self.containers.start()  # probes the sandbox in the background; warns when code cannot run
        try:
            await self.stored.start(vectors=self.embeddings is not None)
            if self.embeddings is not None:
                self._say_retrieval(self.embeddings)
            # Vector stores' upkeep (resumed ingestions, expiry, retention) runs with the store's maintenance.
            upkeep = vector_store_service(self).upkeep
            if upkeep not in self.stored.periodic:
                self.stored.periodic.append(upkeep)
            if self.embeddings is not None and self._backfill is None:
                self._backfill = Backfill(vector_store_service(self))
                self.stored.periodic.append(self._backfill.kick)
            if not self.sealer.configured:
                # No --secret-key: the key every process sharing this store uses, made by the first one to
                # start. With a random key per process, a blob sealed by one replica is silently ignored by
                # the others (the model loses its reasoning when a request lands elsewhere).
                secret = await self.stored.store.shared_secret(SEALING_SECRET, secrets.token_urlsafe(32))
                self.sealer.use_secret(secret)
        except StoreError as exc:
            self.startup_error = exc
            logger.debug("the store cannot be used: %s", exc, exc_info=exc)
            for engine in engines:
                await engine.aclose()
            raise
        self.started_at = int(time.time())

    def _say_retrieval(self, embeddings: Embeddings) -> None:
        """One start-up line: file_search ranks hybrid (and by what), or by full text only, and why."""
        store = self.stored.store
        vectors: str | None = getattr(store, "vectors", None)
        if vectors is not None:
            logger.info(
                "file_search: hybrid retrieval, embeddings from %s, vectors in %s", embeddings.describe(), vectors
            )
        else:
            logger.warning(
                "file_search: full-text retrieval only, --embeddings is not used: %s",
                getattr(store, "no_vectors", None) or "this store keeps no vectors",
            )

    def _bound_context(self, engine: Engine) -> Prompting:
        """Prompt plus output stay within the context the engine reported: ``--context-window`` may only lower it.

        An engine serving a smaller context than the configured window (vLLM or SGLang with ``max_model_len``
        4096, llama.cpp with ``n_ctx`` 4096) refuses any budget over it, or stops silently when its context
        fills, so every budget, truncation and the too-long-prompt 400 of its models are computed against the
        smaller one.
        """
        reported = engine.context_window
        if reported is None or reported >= self.prompting.context_window:
            return self.prompting
        logger.info(
            "the engine's context is %d tokens (configured: %d): prompts and output are kept within it (%s)",
            reported,
            self.prompting.context_window,
            ", ".join(m for m, e in self.engines.items() if e is engine),
        )
        return dataclasses.replace(self.prompting, context_window=reported)

    async def aclose(self) -> None:
        # Ingestions in flight stop first, while the store is open: their files stay in_progress under this
        # process's lease, which ends with it, and the next process resumes them (run/vector_stores.py).
        ingestions = getattr(self, "_vector_store_service", None)
        if ingestions is not None:
            await ingestions.aclose()
        if self._backfill is not None:
            await self._backfill.aclose()
        await self.stored.aclose()  # background work still running ends failed, with a reason
        if self.embeddings is not None:
            await self.embeddings.aclose()
        if self._ready_probe is not None:
            self._ready_probe.cancel()
        for engine in self._distinct_engines():
            await engine.aclose()
        await self.containers.aclose()
        if self.web_search is not None:
            await self.web_search.aclose()

    async def create_response(self, request: ResponseRequest) -> ResponseRun | StoredRun | Background:
        """Build the response's run and decide how it runs (not stored, stored, background).

        Raises:
            APIError: everything the run can be refused for before it starts (see ``start.build_run``).
        """
        assert self.vocab is not None, "Server.start() has not run"
        if self.closing:
            raise shutting_down()
        response_id = random_id("resp")
        created_at = int(time.time())
        engine, prompting = self.route(request.options.model)
        tracing.annotate_request({"gen_ai.request.model": request.options.model, "harmony.response_id": response_id})
        run = await build_run(
            request,
            response_id=response_id,
            created_at=created_at,
            engine=engine,
            vocab=self.vocab,
            sealer=self.sealer,
            prompting=prompting,
            containers=self.containers,
            web_search=self.web_search,
            mcp_options=self.mcp,
            trace=self.trace,
            vector_stores=vector_store_service(self),
        )
        self._runs.add(run)
        return await self.stored.respond(request, run, response_id=response_id, created_at=created_at)

    async def compact(self, request: ResponseRequest) -> dict[str, Any]:
        """``POST /v1/responses/compact``: the conversation's ``CompactedResponse`` (``run/compact.py``).

        Raises:
            EngineError: the engine cannot take the summary's call (503).
            APIError: what create refuses before it runs; 400 for nothing to compact (no input, no previous
                response, an empty conversation); 500 when the model's summary failed.
        """
        assert self.vocab is not None, "Server.start() has not run"
        if self.closing:
            raise shutting_down()
        if not request.model_request.get("input"):
            # A summary of nothing would still cost an engine call (and the model would invent one).
            raise APIError(
                "Missing required parameter: 'input'. There is nothing to compact: send the conversation as "
                "'input', or name it with 'previous_response_id' (or a 'conversation' that has items).",
                param="input",
                code="missing_required_parameter",
            )
        response_id = random_id("resp")
        created_at = int(time.time())
        engine, prompting = self.route(request.options.model)
        run = await build_compact(
            request,
            response_id=response_id,
            engine=engine,
            vocab=self.vocab,
            prompting=prompting,
            python_description=self.containers.description(),
            mcp_options=self.mcp,
        )
        self._runs.add(run)
        try:
            await run.start()
        except BaseException:
            await run.aclose()
            raise
        summary = await write_summary(run)
        if summary.text is None:
            raise APIError(summary.problem, status=500, type="server_error", code="server_error")
        item = {
            "id": random_id("cmp"),
            "type": "compaction",
            "encrypted_content": self.sealer.seal(summary.text, COMPACTION),
        }
        return {
            "id": response_id,
            "object": "response.compaction",
            "created_at": created_at,
            "output": [*compacted_output(request.model_request.get("input") or []), item],
            "usage": summary.usage(),
        }

    async def count_input_tokens(self, request: ResponseRequest) -> int:
        """``POST /v1/responses/input_tokens``: the prompt tokens ``request`` would cost, rendered as create does.

        Raises:
            APIError: what create refuses before it runs (an MCP server the client may not use, a request that
                cannot be rendered).
        """
        assert self.vocab is not None, "Server.start() has not run"
        _, prompting = self.route(request.options.model)
        return await count_input_tokens(
            request, prompting=prompting, python_description=self.containers.description(), mcp_options=self.mcp
        )

    async def prepared_response(self, request: ResponseRequest) -> list[dict[str, Any]]:
        """A response with ``generate: false`` (WebSocket mode): the request's state, no model output.

        Its events (``response.created``, ``response.in_progress``, ``response.completed`` with ``output: []``
        and the prompt's ``input_tokens``) are what a client waiting for the end of a response gets; a
        later request continues from it with ``previous_response_id`` on the same connection (Codex warms
        a connection up this way before its first turn). Nothing is generated; with ``store`` (or a
        ``conversation``) it is kept as any response is, so that its id can be retrieved and continued from
        on another connection (OpenAI's WebSocket guide chains a warm-up's id so).

        Raises:
            APIError: what create refuses before it runs.
        """
        tokens = await self.count_input_tokens(request)
        response = response_skeleton(
            id=random_id("resp"), created_at=int(time.time()), model=request.options.model, **request.echo
        )
        done = {
            **response,
            "status": "completed",
            "completed_at": int(time.time()),
            "usage": usage_object(input_tokens=tokens, cached_tokens=0, output_tokens=0, reasoning_tokens=0),
        }
        events = [
            {"type": "response.created", "sequence_number": 0, "response": response},
            {"type": "response.in_progress", "sequence_number": 1, "response": response},
            {"type": "response.completed", "sequence_number": 2, "response": done},
        ]
        await self.stored.store_prepared(request, events)
        return events

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``GET /ready``: whether every served model has an engine (a replica) that answers and the store takes
        writes (``StoredResponses.problem``), and the details.

        Probes run in the background of the first caller, one at a time; their answer is reused for
        ``READY_CACHE_SECONDS``, so that a load balancer polling many times a second reaches each engine once.
        """
        if self.closing:
            return False, {"status": "unavailable", "reason": "the server is shutting down", "models": []}
        now = time.monotonic()
        if self._ready is not None and now - self._ready[0] < READY_CACHE_SECONDS:
            return self._ready[1]
        if self._ready_probe is None or self._ready_probe.done():
            self._ready_probe = asyncio.get_running_loop().create_task(self._probe_readiness())
        return await asyncio.shield(self._ready_probe)

    async def _probe_readiness(self) -> tuple[bool, dict[str, Any]]:
        async def health(engine: Engine) -> list[EngineHealth]:
            try:
                return await asyncio.wait_for(engine.health(), READY_TIMEOUT)
            except TimeoutError:
                return [EngineHealth(engine.describe(), f"did not answer the probe within {READY_TIMEOUT:g} s")]

        engines = self._distinct_engines()
        found = dict(zip(map(id, engines), await asyncio.gather(*map(health, engines)), strict=True))
        models = []
        for model, engine in self.engines.items():
            entries = [
                {"engine": h.engine, "ready": h.error is None, **({"error": h.error} if h.error else {})}
                for h in found[id(engine)]
            ]
            models.append({"id": model, "ready": any(e["ready"] for e in entries), "engines": entries})
        problem = self.stored.problem
        ready = all(m["ready"] for m in models) and problem is None
        unready = [m["id"] for m in models if not m["ready"]]
        body: dict[str, Any] = {"status": "ready" if ready else "unavailable"}
        reasons = [f"no engine answers for {', '.join(unready)}"] if unready else []
        if problem is not None:
            reasons.append(f"the store fails its writes ({problem})")
        if reasons:
            body["reason"] = "; ".join(reasons)
        body["models"] = models
        body["store"] = {"ready": problem is None, **({"error": problem} if problem is not None else {})}
        result = ready, body
        self._ready = time.monotonic(), result
        return result

    def background_running(self) -> bool:
        """Whether a background response runs in this process: a shutdown's grace waits for it as for a stream."""
        return any(live.background for live in self.stored.live.values())

    def refuse_new(self) -> None:
        """The server is shutting down: refuse new work (503 ``shutting_down``; ``/ready`` answers 503) while
        the running responses go on through their grace."""
        self.closing = True

    def shut_down_runs(self) -> int:
        """Refuse new responses and end the running ones at their next chunk, failed with the reason (the
        grace period for finishing is over); returns how many were running."""
        self.closing = True
        runs = list(self._runs)
        for run in runs:
            run.shutdown()
        return len(runs)
