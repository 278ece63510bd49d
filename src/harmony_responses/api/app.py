"""The Starlette app: routes, middleware, error handlers and the engine's lifetime.

Routes: ``POST /v1/responses`` (responses.py), ``GET /v1/models`` and ``GET /v1/models/{model}`` (the
OpenAI list and model shapes), ``GET /health``. Unknown routes get a JSON 404 and wrong methods a JSON
405 through ``errors.exception_handlers``, so every answer the server gives is OpenAI-shaped.

The lifespan loads the Harmony vocabulary (about a second, once per process) and starts the engine (for
real engines: the start-up check that it is reachable and serves Harmony); it closes the engine on
shutdown. A failed check is logged as one sentence and kept in ``app.state.startup_error`` for the CLI.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, request_response

from ..engine import Engine, EngineError, engine_from_spec
from ..store import StoreError
from ..tools.browser import WebSearch, web_search_from_options
from ..tools.code_interpreter import ContainerManager
from ..vocab import load_encoding, load_vocabulary
from ._turns import FirstTokensFirst
from .auth import BearerAuth
from .config import Config
from .errors import exception_handlers, json_response
from .responses import Services, create_response, model_not_found
from .sealed import configure_reasoning_key
from .state import State
from .stateful import routes as stateful_routes

__all__ = ["create_app"]

MODEL_OWNER = "harmony-responses"

logger = logging.getLogger("harmony_responses.api")


def _model_object(name: str, created: int) -> dict[str, object]:
    return {"id": name, "object": "model", "created": created, "owned_by": MODEL_OWNER}


async def list_models(request: Request) -> Response:
    services: Services = request.app.state.services
    data = [_model_object(m, services.started_at) for m in services.config.models]
    return json_response({"object": "list", "data": data})


async def retrieve_model(request: Request) -> Response:
    services: Services = request.app.state.services
    name = request.path_params["model"]
    if name not in services.config.models:
        raise model_not_found(name)
    return json_response(_model_object(name, services.started_at))


async def not_implemented(request: Request) -> Response:
    # POST /v1/responses/compact and /input_tokens would otherwise match /v1/responses/{id} and answer 405,
    # which tells a client the endpoint exists; 404 is what clients and llm-comply expect of a server
    # without them.
    raise HTTPException(404)


async def health(request: Request) -> Response:
    return json_response({"status": "ok"})


def web_search_from_config(config: Config) -> WebSearch | None:
    """The configured web search backend (None: ``web_search`` tools are not offered); ValueError if invalid."""
    return web_search_from_options(
        backend=config.search_backend,
        search_dir=config.search_dir,
        base_url=config.search_base_url,
        api_key=config.search_api_key,
        api_url=config.search_api_url,
    )


def create_app(config: Config, *, engine: Engine | None = None, web_search: WebSearch | None = None) -> Starlette:
    """The ASGI app serving ``config``.

    Args:
        config: the server's configuration.
        engine: an engine instance to use instead of ``config.engine`` (tests pass a ``MockEngine``).
        web_search: the web search to use instead of the one ``config`` describes (``app.state.web_search``).

    Raises:
        ValueError: ``config.engine`` is not a valid engine spec (the message lists the valid forms).
    """
    engine = engine if engine is not None else engine_from_spec(config.engine, config.engine_options)
    sealer = configure_reasoning_key(config.secret_key)
    containers = ContainerManager(
        limits=config.code_interpreter,
        unsafe=config.unsafe_code_interpreter,
        idle_seconds=config.container_idle_seconds,
    )
    if web_search is None:
        web_search = web_search_from_config(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        vocab = await anyio.to_thread.run_sync(load_vocabulary)
        await anyio.to_thread.run_sync(load_encoding)
        try:
            await engine.start()
        except EngineError as exc:
            app.state.startup_error = exc
            logger.error("the engine cannot serve: %s", exc)
            raise
        containers.start()  # probes the sandbox in the background; warns when code cannot run
        # The store: migrations, this process's lease, and ending what a crashed process left running.
        stateful = State(config)
        try:
            await stateful.start()
        except StoreError as exc:
            app.state.startup_error = exc
            logger.error("the store cannot be used: %s", exc)
            await engine.aclose()
            raise
        app.state.stateful = stateful
        app.state.services = Services(
            config=config, engine=engine, vocab=vocab, sealer=sealer, started_at=int(time.time())
        )
        try:
            yield
        finally:
            await stateful.aclose()  # background work still running ends failed, with a reason
            await engine.aclose()
            await containers.aclose()
            if web_search is not None:
                await web_search.aclose()

    middleware = [Middleware(BearerAuth, keys=config.api_keys)] if config.api_keys else []
    routes = [
        # Requests count as starting until their first delta is out: the loop serves them first (_turns.py).
        Route("/v1/responses", FirstTokensFirst(request_response(create_response)), methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/responses/compact", not_implemented, methods=["POST"]),
        Route("/v1/responses/input_tokens", not_implemented, methods=["POST"]),
        *stateful_routes,
    ]
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=exception_handlers, lifespan=lifespan)
    app.state.config = config
    app.state.engine = engine
    app.state.containers = containers
    app.state.web_search = web_search
    app.state.startup_error = None
    return app
