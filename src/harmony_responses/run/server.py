"""``Server``: what the HTTP layer calls, and everything a running response needs, started and stopped together.

It holds the engine, the Harmony vocabulary, the reasoning sealer, the built-in tools (code interpreter
containers, web search, MCP options), the stored responses and the conversations. ``start()`` (in the
app's lifespan) loads the vocabulary (about a second, once per process), starts the engine (for real
engines, the start-up check that it is reachable and serves Harmony), probes the sandbox and opens the
store (migrations, this process's lease, ending what a crashed process left running, and the sealing key
every process using the store shares); ``aclose()`` ends what still runs, failed with a reason, and closes
it all.

``create_response`` is the one way a response begins: a ``ResponseRequest`` in, and out what the
transport serves: a ``ResponseRun`` (not stored), a ``StoredRun`` (stored, foreground) or a
``Background`` (queued; the POST answers at once).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
import weakref
from collections.abc import Sequence
from typing import Any

import anyio.to_thread

from ..engine import Engine, EngineError
from ..errors import APIError
from ..ids import random_id
from ..request import ReasoningSealer, ResponseRequest
from ..request.sealed import COMPACTION
from ..store import StoreError
from ..tools.browser import WebSearch
from ..tools.code_interpreter import ContainerManager
from ..tools.mcp import McpOptions
from ..translate import response_skeleton, usage_object
from ..vocab import Vocabulary, load_encoding, load_vocabulary
from .compact import compacted_output, write_summary
from .conversations import Conversations
from .live import StoredRun
from .loop import ResponseRun
from .start import Prompting, build_compact, build_run, count_input_tokens
from .stored import Background, StoredResponses

__all__ = ["Server"]

logger = logging.getLogger("harmony_responses.run")

SEALING_SECRET = "reasoning.encrypted_content"  # the store's secrets row the sealing key comes from


class Server:
    """See the module docstring.

    Args:
        models: the model names requests may ask for; the first is the default.
        engine: the engine every response runs on.
        stored: the stored responses (and the store behind them).
        sealer: seals and opens ``reasoning.encrypted_content``.
        prompting: what every prompt is rendered with.
        containers: the code interpreter's containers.
        web_search: the search backend (None: ``web_search`` is not offered to the model).
        mcp: remote MCP options (allowed hosts, stdio servers, timeout).
    """

    def __init__(
        self,
        *,
        models: Sequence[str],
        engine: Engine,
        stored: StoredResponses,
        sealer: ReasoningSealer,
        prompting: Prompting,
        containers: ContainerManager,
        web_search: WebSearch | None,
        mcp: McpOptions,
    ) -> None:
        self.models = tuple(models)
        self.engine = engine
        self.stored = stored
        self.conversations = Conversations(stored)
        self.sealer = sealer
        self.prompting = prompting
        self.containers = containers
        self.web_search = web_search
        self.mcp = mcp
        self.vocab: Vocabulary | None = None
        self.started_at = int(time.time())
        self.startup_error: Exception | None = None  # why start() failed, for the command line's last word
        self.closing = False
        self._runs: weakref.WeakSet[ResponseRun] = weakref.WeakSet()

    async def start(self) -> None:
        """Raises ``EngineError`` or ``StoreError`` (also kept in ``startup_error``) when it cannot serve."""
        self.vocab = await anyio.to_thread.run_sync(load_vocabulary)
        await anyio.to_thread.run_sync(load_encoding)
        try:
            await self.engine.start()
        except EngineError as exc:
            self.startup_error = exc
            logger.error("the engine cannot serve: %s", exc)
            raise
        self._bound_context(self.engine.context_window)
        self.containers.start()  # probes the sandbox in the background; warns when code cannot run
        try:
            await self.stored.start()
            if not self.sealer.configured:
                # No --secret-key: the key every process sharing this store uses, made by the first one to
                # start. With a random key per process, a blob sealed by one replica is silently ignored by
                # the others (the model loses its reasoning when a request lands elsewhere).
                secret = await self.stored.store.shared_secret(SEALING_SECRET, secrets.token_urlsafe(32))
                self.sealer.use_secret(secret)
        except StoreError as exc:
            self.startup_error = exc
            logger.error("the store cannot be used: %s", exc)
            await self.engine.aclose()
            raise
        self.started_at = int(time.time())

    def _bound_context(self, reported: int | None) -> None:
        """Prompt plus output stay within the context the engine reported: ``--context-window`` may only lower it.

        An engine serving a smaller context than the configured window (vLLM or SGLang with ``max_model_len``
        4096, llama.cpp with ``n_ctx`` 4096) refuses any budget over it, or stops silently when its context
        fills, so every budget, truncation and the too-long-prompt 400 are computed against the smaller one.
        """
        if reported is None or reported >= self.prompting.context_window:
            return
        logger.info(
            "the engine's context is %d tokens (configured: %d): prompts and output are kept within it",
            reported,
            self.prompting.context_window,
        )
        self.prompting = dataclasses.replace(self.prompting, context_window=reported)

    async def aclose(self) -> None:
        await self.stored.aclose()  # background work still running ends failed, with a reason
        await self.engine.aclose()
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
            raise APIError(
                "The server is shutting down; try again.", status=503, type="server_error", code="shutting_down"
            )
        response_id = random_id("resp")
        created_at = int(time.time())
        run = await build_run(
            request,
            response_id=response_id,
            created_at=created_at,
            engine=self.engine,
            vocab=self.vocab,
            sealer=self.sealer,
            prompting=self.prompting,
            containers=self.containers,
            web_search=self.web_search,
            mcp_options=self.mcp,
        )
        self._runs.add(run)
        return await self.stored.respond(request, run, response_id=response_id, created_at=created_at)

    async def compact(self, request: ResponseRequest) -> dict[str, Any]:
        """``POST /v1/responses/compact``: the conversation's ``CompactedResponse`` (``run/compact.py``).

        Raises:
            EngineError: the engine cannot take the summary's call (503).
            APIError: what create refuses before it runs; 500 when the model's summary failed.
        """
        assert self.vocab is not None, "Server.start() has not run"
        if self.closing:
            raise APIError(
                "The server is shutting down; try again.", status=503, type="server_error", code="shutting_down"
            )
        response_id = random_id("resp")
        created_at = int(time.time())
        run = await build_compact(
            request,
            response_id=response_id,
            engine=self.engine,
            vocab=self.vocab,
            prompting=self.prompting,
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
        return await count_input_tokens(
            request, prompting=self.prompting, python_description=self.containers.description(), mcp_options=self.mcp
        )

    async def prepared_response(self, request: ResponseRequest) -> list[dict[str, Any]]:
        """A response with ``generate: false`` (WebSocket mode): the request's state, no model output.

        Its events (``response.created``, ``response.in_progress``, ``response.completed`` with ``output: []``
        and the prompt's ``input_tokens``) are what a client waiting for the end of a response gets; a
        later request continues from it with ``previous_response_id`` on the same connection (Codex warms
        a connection up this way before its first turn). Nothing is generated or stored.

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
        return [
            {"type": "response.created", "sequence_number": 0, "response": response},
            {"type": "response.in_progress", "sequence_number": 1, "response": response},
            {"type": "response.completed", "sequence_number": 2, "response": done},
        ]

    def shut_down_runs(self) -> int:
        """Refuse new responses and end the running ones at their next chunk, failed with the reason (the
        grace period for finishing is over); returns how many were running."""
        self.closing = True
        runs = list(self._runs)
        for run in runs:
            run.shutdown()
        return len(runs)
